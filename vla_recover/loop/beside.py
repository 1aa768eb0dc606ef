"""Work no round waits for, run in a second process beside the rounds: the final tests and the baseline's fine-tune.

On 2 cores a round's training leaves the second core mostly idle (the loop's small policies train only ~1.2x faster
on two threads than on one: ``benchmarks/parallel_training.py``), and the final tests and the baseline decide
nothing the rounds need. A job runs on one torch thread; its result becomes the run's step only when the run reaches
that step, so the event log, the order of decisions and resuming are what they are when everything runs in line
(a job lost to a crash is run again on resume).
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vla_recover.train.trainer import TrainConfig


__all__ = ["Beside", "evaluate_on_seeds", "limit_torch_threads", "train_policy"]


def train_policy(config: TrainConfig, on_step: Callable[[int, float], None] | None = None) -> dict[str, Any]:
    """Train (or resume training) ``config``'s policy to its last step; the loop step's result."""
    from vla_recover.train.plots import plot_loss
    from vla_recover.train.trainer import Trainer

    trainer = Trainer(config)
    trainer.resume()  # a crash mid-training continues from the last checkpoint
    trainer.run(on_step)
    plot_loss(config.out / "metrics.jsonl", config.out / "loss.png")
    losses = [r["loss"] for r in trainer.history if "loss" in r]
    return {
        "policy": str(config.out / "policy"),
        "steps": trainer.step,
        "episodes": len(config.select.episodes or ()),
        "final_loss": losses[-1] if losses else None,
        "weights": trainer.weight_stats,
    }


def evaluate_on_seeds(
    policy_dir: str,
    task: str,
    task_config: Any,
    seeds: list[int],
    batch: int,
    action_tolerance: float,
    device: str = "cpu",
    on_batch: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """A saved policy's success on ``seeds``, run as the fleet runs it (its action tolerance, its device)."""
    from vla_recover.evaluate import evaluate_policy
    from vla_recover.policies.common.checkpoint import load_policy

    policy, embedder, _ = load_policy(policy_dir, device)
    return evaluate_policy(
        policy, embedder, task, seeds, batch, task_config, on_batch=on_batch, action_tolerance=action_tolerance
    )


def _timed(work: Callable[..., dict[str, Any]], *args: Any) -> tuple[dict[str, Any], float]:
    started = time.perf_counter()
    return work(*args), round(time.perf_counter() - started, 2)


def limit_torch_threads(threads: int) -> None:
    """A worker process's initializer: torch on ``threads`` threads (processes side by side share the cores)."""
    import torch

    torch.set_num_threads(threads)


class Beside:
    """One worker process on one thread, running jobs in the order they were submitted (a job may read what an
    earlier one wrote); ``take(name)`` waits for a job's result."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._pool = ProcessPoolExecutor(1, mp_context=context, initializer=limit_torch_threads, initargs=(1,))
        self._pool.submit(int)  # start the worker now: its imports overlap what the run does before its first job
        self._jobs: dict[str, Future[tuple[dict[str, Any], float]]] = {}

    def submit(self, name: str, work: Callable[..., dict[str, Any]], *args: Any) -> None:
        self._jobs[name] = self._pool.submit(_timed, work, *args)

    def take(self, name: str) -> dict[str, Any] | None:
        """The job's result with the seconds it ran in the worker (``beside_s``); None when no job of that name was
        submitted."""
        job = self._jobs.pop(name, None)
        if job is None:
            return None
        result, seconds = job.result()
        return {**result, "beside_s": seconds}

    def close(self) -> None:
        for job in self._jobs.values():
            job.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Beside:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
