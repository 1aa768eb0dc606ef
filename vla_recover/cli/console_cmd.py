"""`vla-recover console`: the operator console (web app) over a store and, optionally, a running sim fleet."""

from __future__ import annotations

import getpass
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from vla_recover.cli.common import console, user_errors

__all__ = ["console_app"]

console_app = typer.Typer(help="The operator console: a web app for floor operators and teleoperators.")
user_app = typer.Typer(help="Console users (roles: viewer, floor, teleop, admin).", no_args_is_help=True)
console_app.add_typer(user_app, name="user")


def _users(store: Path) -> Any:
    from vla_recover.console.users import UserDB
    from vla_recover.data.store import CONSOLE_USERS

    return UserDB(store / CONSOLE_USERS)


@console_app.callback(invoke_without_command=True)
def serve(
    context: typer.Context,
    store: Annotated[Path | None, typer.Option(help="episode store (users live beside it)")] = None,
    fleet: Annotated[Path | None, typer.Option(help="fleet YAML to run in the console (configs/fleet/*.yaml)")] = None,
    host: Annotated[str, typer.Option(help="address to bind; loopback unless you mean it")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8000,
    origin: Annotated[list[str] | None, typer.Option(help="extra allowed WebSocket origins")] = None,
    runs: Annotated[Path, typer.Option(help="folder of loop runs for the Runs page")] = Path("runs/loop"),
) -> None:
    """Serve the console; with --fleet, run that fleet (its store is the console's) at the control rate."""
    if context.invoked_subcommand is not None:
        return
    import uvicorn

    from vla_recover.config import load_yaml, validate_config
    from vla_recover.console.runner import FleetRunner
    from vla_recover.console.server import build_app
    from vla_recover.fleet import FleetConfig, build_fleet

    views = None
    with user_errors():
        runner = None
        if fleet is not None:
            raw = load_yaml(fleet)
            if store is not None:
                raw["store"] = store
            config = validate_config(FleetConfig, raw, source=str(fleet))
            store = config.store
            views = tempfile.mkdtemp(prefix="vla_recover_views_")  # the sim robots' views for the pages
            runner = FleetRunner(build_fleet(config, views=views))
        if store is None:
            raise ValueError("store: give --store PATH (or --fleet CONFIG, whose store is used)")
        users = _users(store)
        if not users.users():
            raise ValueError(f"store: no console users in {store}; add one with `vla-recover console user add`")
        origins = [f"http://{name}:{port}" for name in {host, "127.0.0.1", "localhost"}] + list(origin or [])
        app = build_app(runner, users, store, origins, runs)
        if runner is not None:
            runner.start()
    console.print(f"console on http://{host}:{port} (store {store}); Ctrl-C stops")
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        if runner is not None:
            runner.stop()
        if views is not None:
            shutil.rmtree(views, ignore_errors=True)


@user_app.command("add")
def add_user(
    name: Annotated[str, typer.Argument(help="user name")],
    role: Annotated[str, typer.Option(help="viewer, floor, teleop or admin")],
    store: Annotated[Path, typer.Option(help="episode store the console serves")],
    password_stdin: Annotated[bool, typer.Option(help="read the password from stdin (else: prompt)")] = False,
    token: Annotated[bool, typer.Option(help="also print a bearer token for scripts")] = False,
) -> None:
    """Add a console user with a password (hashed; never stored in clear)."""
    with user_errors():
        password = sys.stdin.readline().rstrip("\n") if password_stdin else getpass.getpass(f"password for {name}: ")
        users = _users(store)
        users.add(name, role, password)
        console.print(f"added {name} ({role})")
        if token:
            print(users.issue_token(name, "cli"))


@user_app.command("list")
def list_users(store: Annotated[Path, typer.Option(help="episode store the console serves")]) -> None:
    """Console users and their roles."""
    with user_errors():
        for user in _users(store).users():
            print(f"{user.name}\t{user.role}")
