"""`vla-recover`: one entry point, one module per group of commands."""

from __future__ import annotations

import typer

from vla_recover.cli import collect, fleet, loop, serve, tasks, train
from vla_recover.cli.console_cmd import console_app
from vla_recover.cli.critic import critic_app, label
from vla_recover.cli.interop import export_app, import_app
from vla_recover.cli.ros2 import ros2_app
from vla_recover.cli.store import store_app, view

app = typer.Typer(
    name="vla-recover",
    help="Close the post-training loop for robot manipulation policies.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("tasks")(tasks.list_tasks)
app.command("render")(tasks.render)
app.command("collect")(collect.collect)
app.add_typer(store_app, name="store")
app.command("view")(view)
app.add_typer(export_app, name="export")
app.add_typer(import_app, name="import")
app.command("train")(train.train)
app.command("eval")(train.evaluate)
app.command("serve")(serve.serve)
app.command("fleet")(fleet.fleet)
app.add_typer(critic_app, name="critic")
app.command("label")(label)
app.command("loop")(loop.loop)
app.add_typer(ros2_app, name="ros2")
app.add_typer(console_app, name="console")


if __name__ == "__main__":
    app()
