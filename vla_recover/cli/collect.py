"""`vla-recover collect`: scripted demonstrations into the episode store, the main job until the loop runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from vla_recover.cli.common import console, progress_bar, user_errors

__all__ = ["collect"]


def collect(
    config: Annotated[Path | None, typer.Option(help="YAML config (configs/collect/*.yaml); default: embedded")] = None,
    task: Annotated[str | None, typer.Option(help="task id or name (overrides the config)")] = None,
    episodes: Annotated[int | None, typer.Option(help="number of episodes (overrides the config)", min=1)] = None,
    out: Annotated[Path | None, typer.Option(help="episode store to append to (default: runs/demos)")] = None,
    expert_noise: Annotated[
        float | None, typer.Option(help="std of the expert's action noise (overrides the config)", min=0.0)
    ] = None,
    seed: Annotated[int | None, typer.Option(help="first episode seed (overrides the config)", min=0)] = None,
    workers: Annotated[int | None, typer.Option(help="parallel worker processes (overrides the config)", min=1)] = None,
) -> None:
    """Record scripted-expert demonstrations (actor `scripted`) into an episode store and print a summary."""
    from vla_recover.config import load_yaml, validate_config
    from vla_recover.envs import load_task_config, resolve_task_name
    from vla_recover.rollout import CollectConfig, collect_demos, summarize

    with user_errors():
        raw: dict[str, Any] = load_yaml(config) if config else {}
        overrides = {"task": task, "episodes": episodes, "out": out, "seed": seed, "workers": workers}
        raw.update({k: v for k, v in overrides.items() if v is not None})
        if expert_noise is not None:
            raw["expert"] = {**raw.get("expert", {}), "action_noise": expert_noise}
        cfg = validate_config(CollectConfig, raw, source=str(config or "embedded default"))
        cfg = cfg.model_copy(update={"task": resolve_task_name(cfg.task)})
        load_task_config(cfg.task, cfg.task_config or None)  # fail on a bad task config before any work starts
        with progress_bar() as progress:
            job = progress.add_task(f"collect {cfg.task}", total=cfg.episodes, status="")

            def on_progress(done: int, successes: int) -> None:
                progress.update(job, completed=done, status=f"success {successes}/{done}")

            ids, seconds = collect_demos(cfg, on_progress)
        summary = summarize(cfg.out, ids, seconds)
    table = Table(title=f"scripted demos: {summary['task']} → {summary['store']}", show_header=False)
    for key in ("episodes", "success_rate", "mean_length", "steps", "steps_per_s", "failures_injected"):
        value = summary[key]
        table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
    table.add_row("instructions", "\n".join(summary["instructions"]))
    console.print(table)
    print(json.dumps({k: v for k, v in summary.items() if k != "instructions"}))
