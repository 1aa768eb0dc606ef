"""`vla-recover loop`: the post-training loop on one config, resumable from its event log."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import Progress, TaskID

from vla_recover.cli.common import console, progress_bar, user_errors
from vla_recover.loop.methods import LOOP_METHODS

__all__ = ["loop"]


class _RichReporter:
    """One progress bar per loop step, and a line per finished step."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.job: TaskID | None = None

    def begin(self, step: str, total: int | None) -> None:
        self.job = self.progress.add_task(step, total=total, status="")

    def advance(self, completed: int, status: str = "") -> None:
        if self.job is not None:
            self.progress.update(self.job, completed=completed, status=status)

    def end(self, step: str, result: dict[str, Any], reused: bool) -> None:
        if self.job is not None:
            task = next(t for t in self.progress.tasks if t.id == self.job)
            self.progress.update(self.job, completed=task.total or task.completed, status="done")
            self.progress.stop_task(self.job)  # a step without a total never finishes: stop its clock here
            self.job = None
        console.print(f"[bold]{step}[/bold] {'(from the log) ' if reused else ''}{_headline(result)}")


def _headline(result: dict[str, Any]) -> str:
    if "success_rate" in result:
        low, high = result["ci95"]
        return f"success {result['success_rate']:.1%} (95% CI {low:.1%}-{high:.1%}, n={result['episodes']})"
    if "promote" in result:
        verdict = "promoted" if result["promote"] else "discarded"
        if result.get("test") == "mcnemar":
            return (
                f"{verdict}: {result['candidate_only']} seeds won only by the candidate, {result['current_only']} only "
                f"by the current version; McNemar p = {result['p_value']:.3g}"
            )
        return f"{verdict}: lower bound of the gain {result['diff_lower_bound']:+.3f} at {result['confidence']:.0%}"
    if "outcomes" in result:
        return f"{result['episodes']} episodes {result['outcomes']}, {result['interventions']} interventions"
    if "segments" in result:
        return f"segments (steps) {result['segments']}"
    if "policy" in result:
        return f"{result['steps']} steps on {result['episodes']} episodes, loss {result['final_loss']}"
    if "report" in result:
        return str(result["report"])
    return f"{len(result.get('episode_ids', []))} episodes"


def loop(
    config: Annotated[Path | None, typer.Option(help="YAML config (configs/loop/*.yaml); default: embedded")] = None,
    method: Annotated[str | None, typer.Option(help=f"one of {', '.join(LOOP_METHODS.names())}")] = None,
    rounds: Annotated[int | None, typer.Option(help="rounds (overrides the config)", min=0)] = None,
    out: Annotated[Path | None, typer.Option(help="run folder (overrides the config)")] = None,
) -> None:
    """Collect demos, train the base policy, run K rounds of fleet → critic → retrain → evaluate → promote, report.

    Re-running with the same config resumes a crashed run from its event log.
    """
    from vla_recover.config import load_yaml, validate_config
    from vla_recover.loop.config import QUICKSTART, LoopConfig
    from vla_recover.loop.runner import LoopRun

    with user_errors():
        raw: dict[str, Any] = load_yaml(config) if config else dict(QUICKSTART)
        raw.update({k: v for k, v in {"method": method, "rounds": rounds, "out": out}.items() if v is not None})
        cfg = validate_config(LoopConfig, raw, source=str(config or "embedded default"))
        console.print(f"loop {cfg.name}: {cfg.method} on {cfg.task}, {cfg.rounds} rounds → {cfg.run_dir}")
        with progress_bar() as progress:
            # the final tests and the baseline's fine-tune run beside the rounds where there is a second core
            summary = LoopRun(cfg, _RichReporter(progress), beside=(os.cpu_count() or 1) >= 2).run()
    console.print(f"report: {cfg.run_dir / 'report.md'}")
    final = summary["final"]
    figures = {"run": str(cfg.run_dir), "policy": final["policy"], "success_rate": final["success_rate"]}
    if final["final_test"] is not None:  # the figure to judge the run by: seeds no decision has seen
        figures.update(
            final_test_success=final["final_test"]["success_rate"], final_test_ci95=final["final_test"]["ci95"]
        )
    if summary["baseline"] is not None:  # the same human time spent on demonstrations, on the same seeds
        baseline = summary["baseline"]
        figures.update(
            baseline=baseline["method"], baseline_human_s=baseline["human_s"],
            baseline_success=baseline["test"]["success_rate"], baseline_ci95=baseline["test"]["ci95"],
        )  # fmt: skip
    print(json.dumps(figures))
