"""`vla-recover collect`: scripted demonstrations, the main job until the loop runs."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from vla_recover.cli.common import console, progress_bar, user_errors

__all__ = ["collect"]


def collect(
    config: Annotated[Path | None, typer.Option(help="YAML config (configs/collect/*.yaml); default: embedded")] = None,
    task: Annotated[str | None, typer.Option(help="override the config's task")] = None,
    episodes: Annotated[int | None, typer.Option(help="override the number of episodes", min=1)] = None,
    out: Annotated[Path | None, typer.Option(help="write episodes (.npz) and summary.json here")] = None,
) -> None:
    """Collect scripted-expert demonstrations and print a summary."""
    from vla_recover.config import load_yaml, validate_config
    from vla_recover.envs import load_task_config
    from vla_recover.rollout import CollectConfig, collect_demos, summarize

    with user_errors():
        raw: dict[str, Any] = dict(load_yaml(config) or {}) if config else {}
        if task is not None:
            raw["task"] = task
        if episodes is not None:
            raw["episodes"] = episodes
        cfg = validate_config(CollectConfig, raw, source=str(config or "embedded default"))
        load_task_config(cfg.task, cfg.task_config or None)  # fail on a bad task before any work starts
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        with progress_bar() as progress:
            job = progress.add_task(f"collect {cfg.task}", total=cfg.episodes, status="")
            successes = 0

            def on_episode(record: Any) -> None:
                nonlocal successes
                successes += record.success
                if out is not None:
                    np.savez_compressed(out / f"episode_{record.seed:06d}.npz", **record.arrays())
                progress.update(job, advance=1, status=f"success {successes}/{progress.tasks[job].completed + 1:.0f}")

            records = collect_demos(cfg, on_episode)
        summary = summarize(records, time.perf_counter() - start)
    table = Table(title=f"scripted demos: {summary['task']}", show_header=False)
    for key in ("episodes", "success_rate", "mean_length", "steps", "steps_per_s", "failures_injected"):
        value = summary[key]
        table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
    table.add_row("instructions", "\n".join(summary["instructions"]))
    console.print(table)
    if out is not None:
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
        console.print(f"wrote {len(records)} episodes to {out}")
