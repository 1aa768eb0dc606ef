"""`vla-recover train` and `vla-recover eval`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from vla_recover.cli.common import console, progress_bar, user_errors
from vla_recover.devices import DEVICE_HELP

__all__ = ["evaluate", "train"]


def train(
    config: Annotated[Path | None, typer.Option(help="YAML config (configs/train/*.yaml); default: embedded")] = None,
    data: Annotated[Path | None, typer.Option(help="episode store to train on (overrides the config)")] = None,
    out: Annotated[Path | None, typer.Option(help="run directory (overrides the config)")] = None,
    steps: Annotated[int | None, typer.Option(help="gradient steps (overrides the config)", min=1)] = None,
    resume: Annotated[bool, typer.Option(help="continue from the run directory's latest checkpoint")] = True,
    nproc_per_node: Annotated[
        int,
        typer.Option(
            help="train on this many processes of this machine (torchrun, DDP: one per GPU, gloo on CPUs); "
            "batch_size stays the global batch",
            min=1,
            max=1024,
        ),
    ] = 1,
) -> None:
    """Train a policy on an episode store: progress bar, metrics.jsonl, loss.png, checkpoints, closed-loop eval."""
    if nproc_per_node > 1 and "WORLD_SIZE" not in os.environ:
        raise typer.Exit(_launch_ranks(nproc_per_node))
    from vla_recover.config import load_yaml, validate_config
    from vla_recover.evaluate import check_policy_fits_task, evaluate_policy
    from vla_recover.train.distributed import stop_ranks
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

        if not trainer.ranks.main:  # the other ranks train quietly; rank 0 reports for all
            trainer.run(None, evaluate)
            stop_ranks(trainer.ranks)
            return
        with progress_bar() as progress:
            ranks = f" on {trainer.ranks.world} processes" if trainer.ranks.distributed else ""
            job = progress.add_task(
                f"train {cfg.policy}{ranks}", total=cfg.steps, completed=trainer.step,
                status="resumed" if resumed else "",
            )  # fmt: skip

            def on_step(step: int, loss: float) -> None:
                progress.update(job, completed=step, status=f"loss {loss:.4f}")

            final = trainer.run(on_step, evaluate)
        plot_loss(cfg.out / "metrics.jsonl", cfg.out / "loss.png")
        stop_ranks(trainer.ranks)
    console.print(f"policy saved to {cfg.out / 'policy'}; loss curve {cfg.out / 'loss.png'}")
    print(json.dumps(final))


def _launch_ranks(processes: int) -> int:
    """This same command again under torchrun on ``processes`` local processes; returns torchrun's exit code."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
    return subprocess.call([*launcher, "-m", "vla_recover", *sys.argv[1:]])


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
    device: Annotated[str, typer.Option(help=f"where the policy runs: {DEVICE_HELP}")] = "auto",
    ray_address: Annotated[
        str | None, typer.Option(help="run the workers as tasks on this Ray cluster ('auto': the local one)")
    ] = None,
    task_config: Annotated[
        Path | None,
        typer.Option(help="YAML of the task's config fields, e.g. the failures it injects (configs/tasks/<task>/)"),
    ] = None,
) -> None:
    """Closed-loop success rate with a 95% confidence interval and the per-seed outcomes (and, where the task
    injects failures, success split by the failures that fired), printed as JSON."""
    from vla_recover.config import load_yaml
    from vla_recover.envs import load_task_config
    from vla_recover.evaluate import evaluate_checkpoint, success_by_failure

    with user_errors():
        fields = None
        if task_config is not None:
            load_task_config(task, task_config)  # a bad field is named before any worker starts
            fields = load_yaml(task_config)
    with user_errors(), progress_bar() as progress:
        job = progress.add_task(f"eval {task}", total=episodes, status=f"{workers} worker(s)")

        def on_progress(done: int, successes: int) -> None:
            progress.update(job, completed=done, status=f"success {successes}/{done}")

        result = evaluate_checkpoint(
            policy, task, episodes, seed, workers, task_config=fields, video_dir=videos, on_progress=on_progress,
            action_tolerance=action_tolerance, device=device, ray_address=ray_address,
        )  # fmt: skip
    print(json.dumps({**result, "success_by_failure": success_by_failure(result)}))
