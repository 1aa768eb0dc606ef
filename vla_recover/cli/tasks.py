"""`vla-recover tasks` and `vla-recover render`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from vla_recover.cli.common import console, progress_bar, user_errors

__all__ = ["list_tasks", "render"]


def list_tasks() -> None:
    """List the registered tasks with their gym ids, phases and a summary."""
    from vla_recover.envs import TASKS, gym_id

    table = Table(title="vla_recover tasks")
    for column in ("id", "phases", "summary"):
        table.add_column(column)
    for entry in TASKS:
        try:
            phases = " → ".join(entry.load().PHASES)
        except ImportError as exc:
            phases = f"[dim](unavailable: {exc.name} not installed)[/]"
        table.add_row(gym_id(entry.name), phases, entry.summary)
    console.print(table)


def render(
    task: Annotated[str, typer.Option(help="task id or name, e.g. vla_recover/LiftCube-v0")],
    out: Annotated[Path, typer.Option(help="output video, .mp4 or .gif")],
    seed: Annotated[int, typer.Option(help="episode seed", min=0)] = 0,
    size: Annotated[int, typer.Option(help="frame height and width in pixels", min=64, max=1024)] = 256,
    skill: Annotated[float, typer.Option(help="expert skill knob: 0 perfect … 1 clumsy", min=0.0, max=1.0)] = 0.0,
    failure: Annotated[str | None, typer.Option(help="inject a failure, KIND@PHASE, e.g. early_release@lift")] = None,
) -> None:
    """Render one scripted-expert episode to a video a person can look at."""
    import imageio.v3 as iio

    from vla_recover.envs.expert import ExpertConfig
    from vla_recover.rollout import expert_episodes

    if out.suffix.lower() not in (".mp4", ".gif"):
        raise typer.BadParameter(f"got {out.name!r}; expected a .mp4 or .gif file", param_hint="--out")
    task_config: dict[str, object] = {}
    if failure:
        kind, _, phase = failure.partition("@")
        task_config["failures"] = [{"kind": kind, "phase": phase or None, "delay": [1, 1]}]
    with user_errors():
        with progress_bar() as progress:
            job = progress.add_task(f"render {task}", total=None, status="running the expert")
            episode = next(expert_episodes(task, [seed], ExpertConfig.at_level(skill), task_config, render_size=size))
            progress.update(job, total=1, completed=1, status=f"{episode.length} steps")
        frames = episode.observations["frames"]
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix.lower() == ".gif":
            iio.imwrite(out, frames, duration=50, loop=0)
        else:
            iio.imwrite(out, frames, fps=20, codec="libx264")
    outcome = "success" if episode.success else "failure"
    console.print(f'{out}: {len(frames)} frames, {outcome}, instruction "{episode.instruction}"')
