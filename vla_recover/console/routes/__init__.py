"""The console's routes, one module per concern; ``build_app`` mounts them all."""

from __future__ import annotations

from starlette.routing import BaseRoute

from vla_recover.console.routes import fleet, runs, session, store

__all__ = ["ROUTES"]

ROUTES: list[BaseRoute] = [*session.ROUTES, *fleet.ROUTES, *store.ROUTES, *runs.ROUTES]
