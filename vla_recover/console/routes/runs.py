"""Loop runs: their summaries and plots, read from the runs folder."""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from vla_recover.console.access import ApiError
from vla_recover.console.records import loop_run, loop_runs, run_card
from vla_recover.console.state import console_of

__all__ = ["ROUTES"]


async def run_list(request: Request) -> Response:
    console = console_of(request)
    console.caller(request, "view")
    return JSONResponse([run_card(path) for path in loop_runs(console.runs)])


async def run(request: Request) -> Response:
    console = console_of(request)
    console.caller(request, "view")
    path = loop_run(console.runs, request.path_params["run"])
    summary = json.loads((path / "summary.json").read_text())
    plots = sorted(p.name for p in (path / "plots").glob("*.png")) if (path / "plots").is_dir() else []
    return JSONResponse({**summary, "plots": plots})


async def run_plot(request: Request) -> Response:
    console = console_of(request)
    console.caller(request, "view")
    path = loop_run(console.runs, request.path_params["run"])
    plots = {p.name: p for p in (path / "plots").glob("*.png")} if (path / "plots").is_dir() else {}
    name = request.path_params["plot"]
    if name not in plots:  # only files listed in the run's plots folder: no path from the request is opened
        raise ApiError(404, f"plot: run {path.name} has no plot {name!r} ({', '.join(sorted(plots)) or 'none'})")
    return FileResponse(plots[name], media_type="image/png")


ROUTES: list[BaseRoute] = [
    Route("/api/runs", run_list),
    Route("/api/runs/{run}", run),
    Route("/api/runs/{run}/plots/{plot}", run_plot),
]
