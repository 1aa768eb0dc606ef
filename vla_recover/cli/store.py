"""`vla-recover store info`, `vla-recover store check` and `vla-recover view` (an episode in the Rerun viewer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from vla_recover.cli.common import console, user_errors

__all__ = ["store_app"]

store_app = typer.Typer(help="Inspect and verify episode stores.", no_args_is_help=True)


@store_app.command("info")
def info(
    path: Annotated[Path, typer.Argument(help="episode store directory")],
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
) -> None:
    """Summarise a store: episodes by outcome, who chose the steps, policy versions, segment kinds, size on disk."""
    from vla_recover.data import store_summary

    with user_errors():
        summary = store_summary(path)
    if as_json:
        console.print_json(json.dumps(summary))
        return
    table = Table(title=f"store {path}", show_header=False)
    table.add_row("episodes", str(summary["episodes"]))
    table.add_row("steps", str(summary["steps"]))
    for field in ("outcomes", "tasks", "robots", "actor_steps", "segments"):
        values = summary[field]
        table.add_row(field.replace("_", " "), ", ".join(f"{k}: {v}" for k, v in values.items()) or "-")
    versions = summary["policy_versions"]
    table.add_row(
        "policy versions",
        "\n".join(f"{v}: {u['steps']} steps in {u['episodes']} episodes ({u['successes']} successful)"
                  for v, u in versions.items()) or "-",
    )  # fmt: skip
    table.add_row("events", str(summary["events"]))
    keys = summary["keys"]
    table.add_row("keys", "\n".join(f"{k} {tuple(v['shape'])} {v['dtype']}" for k, v in keys.items()) or "-")
    table.add_row("size on disk", f"{summary['size_bytes'] / 1e6:.1f} MB")
    console.print(table)


@store_app.command("check")
def check(path: Annotated[Path, typer.Argument(help="episode store directory")]) -> None:
    """Verify a store without changing it: schema, index, every committed chunk, segment bounds. Exit 1 on problems."""
    from vla_recover.data import check_store

    report = check_store(path)
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    for problem in report.problems:
        console.print(f"[bold red]problem:[/] {problem}", highlight=False)
    verdict = "[green]ok[/]" if report.ok else "[bold red]FAILED[/]"
    console.print(f"{path}: {verdict} ({report.episodes} episodes, {report.steps} steps)")
    if not report.ok:
        raise typer.Exit(code=1)


def view(
    store: Annotated[Path, typer.Option(help="episode store directory")],
    episode: Annotated[int, typer.Option(help="the episode's id (vla-recover store info lists the store)", min=0)],
    save: Annotated[
        Path | None, typer.Option(help="write the recording to this .rrd file (no display needed); open: rerun FILE")
    ] = None,
) -> None:
    """One episode in the Rerun viewer: cameras, state and action, progress, who acted, segments and events on one
    step timeline. With --save, an .rrd file instead of a window."""
    import os

    from vla_recover.data.rerun_view import save_episode_recording

    with user_errors():
        if save is None and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            raise ValueError("save: no display to open the viewer on; pass --save FILE.rrd and open it with rerun")
        if save is not None and save.suffix != ".rrd":
            raise ValueError(f"save: {save} must end in .rrd")
        try:
            out = save_episode_recording(store, episode, save, spawn=save is None)
        except KeyError as exc:  # no such episode: the message names the store's ids
            raise ValueError(f"episode: {exc.args[0]}") from None
    if out is not None:
        console.print(f"episode {episode} of {store} → {out} (open it with: rerun {out})", highlight=False)
