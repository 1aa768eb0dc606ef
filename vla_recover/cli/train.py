"""`vla-recover train` and `vla-recover eval`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from vla_recover.cli.common import console, progress_bar, user_errors

__all__ = ["evaluate", "train"]


def train(
    config: Annotated[Path | None, typer.Option(help="YAML config (configs/train/*.yaml); default: embedded")] = None,
    data: Annotated[Path | None, typer.Option(help="episode store to train on (overrides the config)")] = None,
    out: Annotated[Path | None, typer.Option(help="run directory (overrides the config)")] = None,
    steps: Annotated[int | None, typer.Option(help="gradient steps (overrides the config)", min=1)] = None,
    resume: Annotated[bool, typer.Option(help="continue from the run directory's latest checkpoint")] = True,
) -> None:
    """Train a policy on an episode store: progress bar, metrics.jsonl, loss.png, checkpoints, closed-loop eval."""
    from vla_recover.config import load_yaml, validate_config
    from vla_recover.evaluate import check_policy_fits_task, evaluate_policy
    from vla_recover.train.plots import plot_loss
    from vla_recover.train.trainer import TrainConfig, Trainer

    with user_errors():
        raw: dict[str, Any] = load_yaml(config) if config else {}
        raw.update({k: v for k, v in {"data": data, "out": out, "steps": steps}.items() if v is not None})
        cfg = validate_config(TrainConfig, raw, source=str(config or "embedded default"))
        trainer = Trainer(cfg)
        resumed = resume and trainer.resume()
        evaluate = None
        if cfg.eval_task:
            check_policy_fits_task(trainer.policy, cfg.eval_task)
            seeds = list(range(cfg.eval_seed, cfg.eval_seed + cfg.eval_episodes))

            def evaluate(policy: Any, embedder: Any) -> dict[str, Any]:
                result = evaluate_policy(policy, embedder, cfg.eval_task or "", seeds)
                return {"eval_success_rate": result["success_rate"], "eval_ci95": result["ci95"]}

        with progress_bar() as progress:
            job = progress.add_task(
                f"train {cfg.policy}", total=cfg.steps, completed=trainer.step, status="resumed" if resumed else ""
            )

            def on_step(step: int, loss: float) -> None:
                progress.update(job, completed=step, status=f"loss {loss:.4f}")

            final = trainer.run(on_step, evaluate)
        plot_loss(cfg.out / "metrics.jsonl", cfg.out / "loss.png")
    console.print(f"policy saved to {cfg.out / 'policy'}; loss curve {cfg.out / 'loss.png'}")
    print(json.dumps(final))


def evaluate(
    policy: Annotated[Path, typer.Option(help="policy directory (config.json + model.safetensors)")],
    task: Annotated[str, typer.Option(help="task id or name")],
    episodes: Annotated[int, typer.Option(help="episodes (one seed each)", min=1)] = 100,
    seed: Annotated[int, typer.Option(help="first seed; keep them disjoint from training seeds", min=0)] = 100_000,
    workers: Annotated[int, typer.Option(help="parallel worker processes", min=1)] = 1,
    videos: Annotated[Path | None, typer.Option(help="save one mp4 per episode here")] = None,
    action_tolerance: Annotated[
        float,
        typer.Option(
            help="policy actions up to this far outside [-1, 1] are clipped, further out the chunk is rejected and "
            "the robot holds (as the fleet's policy_action_tolerance)",
            min=0.0,
            max=100.0,
        ),
    ] = 1.0,
) -> None:
    """Closed-loop success rate with a 95% confidence interval and the per-seed outcomes, printed as JSON."""
    from vla_recover.evaluate import evaluate_checkpoint

    with user_errors(), progress_bar() as progress:
        job = progress.add_task(f"eval {task}", total=episodes, status=f"{workers} worker(s)")

        def on_progress(done: int, successes: int) -> None:
            progress.update(job, completed=done, status=f"success {successes}/{done}")

        result = evaluate_checkpoint(
            policy, task, episodes, seed, workers, video_dir=videos, on_progress=on_progress,
            action_tolerance=action_tolerance,
        )  # fmt: skip
    print(json.dumps(result))
