"""`vla-recover export ...` and `vla-recover import ...`: move episodes between the store and other formats.

Registered in main.py as ``app.add_typer(export_app, name="export")`` and ``app.add_typer(import_app, name="import")``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from vla_recover.cli.common import console, progress_bar, user_errors

__all__ = ["export_app", "import_app"]

export_app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
import_app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


@contextmanager
def _store_errors() -> Iterator[None]:
    """A store locked by another writer or an unwritable path: a message for the user, not a traceback."""
    try:
        yield
    except (RuntimeError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError) as exc:
        raise ValueError(str(exc)) from None


@export_app.callback()
def export_group() -> None:
    """Write the episodes of a store in another format (LeRobot, rosbag2)."""


@import_app.callback()
def import_group() -> None:
    """Append episodes from another format (LeRobot, rosbag2) to a store."""


@export_app.command("lerobot")
def export_lerobot_command(
    store: Annotated[Path, typer.Option(help="the store to export (a vla_recover store directory)")],
    out: Annotated[Path, typer.Option(help="the LeRobot dataset directory to write (must not exist or be empty)")],
    fps: Annotated[
        int, typer.Option(help="frames per second written to info.json (timestamps are frame/fps)", min=1)
    ] = 20,
    repo_id: Annotated[str | None, typer.Option(help="a label for info.json, e.g. user/name")] = None,
    robot_type: Annotated[str | None, typer.Option(help="robot_type written to info.json")] = None,
    overwrite: Annotated[bool, typer.Option(help="replace OUT if it exists")] = False,
) -> None:
    """Export every episode as a LeRobotDataset v3.0 directory (images embedded as PNG).

    Load it in LeRobot with LeRobotDataset(repo_id, root=OUT). Provenance columns (actor, intervention,
    policy_version, phase, progress) become extra features; the instruction is the LeRobot task.
    """
    from vla_recover.data.lerobot import export_lerobot

    with user_errors(), _store_errors():
        if not store.is_dir():
            raise FileNotFoundError(f"{store}: no such store")
        with progress_bar() as progress:
            job = progress.add_task("export lerobot", total=None, status="")

            def on_episode(done: int, total: int) -> None:
                progress.update(job, completed=done, total=total, status=f"episode {done}/{total}")

            report = export_lerobot(
                store, out, fps=fps, repo_id=repo_id, robot_type=robot_type, overwrite=overwrite, progress=on_episode
            )
    table = Table(title=f"LeRobot dataset: {report.out}", show_header=False)
    table.add_row("episodes", str(report.episodes))
    table.add_row("frames", str(report.frames))
    table.add_row("tasks", str(report.tasks))
    table.add_row("data files", str(report.data_files))
    table.add_row("features", "\n".join(f"{k} -> {v}" for k, v in report.features.items()))
    console.print(table)


@import_app.command("lerobot")
def import_lerobot_command(
    dataset: Annotated[Path, typer.Argument(help="a LeRobotDataset v3.0 directory (holds meta/info.json)")],
    out: Annotated[Path, typer.Option(help="the store to append to (created if missing)")],
    actor: Annotated[str, typer.Option(help="who acted where the dataset has no intervention flag")] = "scripted",
    robot: Annotated[str | None, typer.Option(help="robot name; default: info.json's robot_type")] = None,
    task: Annotated[str | None, typer.Option(help="our task name; default: the dataset directory's name")] = None,
    success_reward: Annotated[
        float, typer.Option(help="an episode whose next.reward reaches this counts as a success")
    ] = 1.0,
) -> None:
    """Import a LeRobot v3.0 dataset (state, embedded images or video) into a store.

    Frames where the dataset's `intervention` is true are recorded as actor `human`. Outcome comes from
    next.success, else next.reward, else next.done, else `success`. Only complete episodes are appended.
    """
    from vla_recover.data.lerobot import import_lerobot

    with user_errors(), _store_errors(), progress_bar() as progress:
        job = progress.add_task("import lerobot", total=None, status="")

        def on_episode(done: int, total: int) -> None:
            progress.update(job, completed=done, total=total, status=f"episode {done}/{total}")

        report = import_lerobot(
            dataset,
            out,
            default_actor=actor,
            robot=robot,
            task=task,
            success_reward=success_reward,
            progress=on_episode,
        )
    table = Table(title=f"imported into {report.store}", show_header=False)
    table.add_row("episodes", str(report.episodes))
    table.add_row("steps", str(report.steps))
    if report.ids:
        table.add_row("episode ids", f"{report.ids[0]}..{report.ids[-1]}")
    table.add_row("keys", "\n".join(f"{k} -> {v}" for k, v in report.keys.items()))
    if report.skipped:
        table.add_row("skipped", ", ".join(report.skipped))
    console.print(table)


@export_app.command("rosbag")
def export_rosbag_command(
    store: Annotated[Path, typer.Option(help="the store holding the episode")],
    episode: Annotated[int, typer.Option(help="episode id", min=0)],
    out: Annotated[Path, typer.Option(help="the rosbag2 directory to write (must not exist)")],
    storage: Annotated[str, typer.Option(help="sqlite3 or mcap")] = "sqlite3",
) -> None:
    """Write one episode as a rosbag2 recording: a topic per data key, provenance and metadata as JSON."""
    from vla_recover.data import EpisodeStore
    from vla_recover.data.rosbag import export_episode_bag

    with user_errors(), _store_errors():
        if storage not in ("sqlite3", "mcap"):
            raise ValueError(f"storage: {storage!r} is not sqlite3 or mcap")
        if not store.is_dir():
            raise FileNotFoundError(f"{store}: no such store")
        with EpisodeStore(store) as opened:
            if not 0 <= episode < len(opened):
                raise ValueError(f"episode: {episode} is not in {store} (ids 0..{len(opened) - 1})")
            export_episode_bag(opened, episode, out, storage=storage)  # type: ignore[arg-type]
    console.print(f"wrote {out}")


@import_app.command("rosbag")
def import_rosbag_command(
    bag: Annotated[Path, typer.Argument(help="a rosbag2 directory (holds metadata.yaml)")],
    out: Annotated[Path, typer.Option(help="the store to append to (created if missing)")],
    task: Annotated[str | None, typer.Option(help="the task (for a robot's own recording)")] = None,
    topic: Annotated[
        list[str] | None, typer.Option(help="KEY=TOPIC for a robot's recording, e.g. obs.state=/joint_states")
    ] = None,
    instruction: Annotated[str, typer.Option(help="the instruction (for a robot's own recording)")] = "",
) -> None:
    """Append a bag as one episode: a vla_recover export as it was, or a robot recording through --topic maps."""
    from vla_recover.data import EpisodeStore
    from vla_recover.data.rosbag import read_bag

    with user_errors(), _store_errors():
        topics = None
        if topic:
            pairs = [item.split("=", 1) for item in topic]
            bad = [item for item, pair in zip(topic, pairs, strict=True) if len(pair) != 2 or not all(pair)]
            if bad:
                raise ValueError(f"topic: {bad[0]!r} is not KEY=TOPIC")
            topics = {key: name for key, name in pairs}
        data = read_bag(bag, task=task, topics=topics, instruction=instruction)
        with EpisodeStore(out, mode="a") as store:
            (episode_id,) = store.append_episodes([data])
    console.print(f"episode {episode_id} ({data.length} steps) appended to {out}")
