"""Training throughput of one process on every core against one single-threaded process per core, side by side.

The loop's small policies (the quickstart's flow UNet, batch 64) are too small for torch's intra-op threads to pay:
this says how many more training steps an hour ``benchmarks/loop.py --jobs`` buys by running methods side by side
on one thread each instead of one after the other on all threads. Both arms train the same policy on random
batches for the same number of steps; the side-by-side arm counts the steps of all its processes.
Last line: one JSON object.

    python benchmarks/parallel_training.py [--steps 200] [--batch 64] [--processes 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time

import numpy as np
import torch

from vla_recover.policies import build_policy
from vla_recover.train.trainer import make_optimizer

STATE_DIM, ACTION_DIM, HORIZON, OBS_STEPS = 26, 5, 16, 2
QUICKSTART_POLICY = {
    "obs_horizon": OBS_STEPS, "action_horizon": HORIZON, "action_exec": 8, "down_dims": [32, 64, 128],
    "inference_steps": 4,
}  # fmt: skip


def train_steps(steps: int, batch: int, threads: int) -> float:
    """Seconds ``steps`` training steps take on ``threads`` torch threads (after 5 warm-up steps)."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    policy = build_policy("flow", QUICKSTART_POLICY, {"obs.state": (STATE_DIM,)}, ACTION_DIM)
    rng = np.random.default_rng(0)
    policy.fit_normalizer(
        {"obs.state": rng.normal(size=(100, STATE_DIM)), "action": rng.normal(size=(100, ACTION_DIM))}
    )
    optimizer = make_optimizer(policy, lr=1e-4, weight_decay=1e-6)
    data = {
        "obs.state": torch.randn(batch, OBS_STEPS, STATE_DIM),
        "action": torch.randn(batch, HORIZON, ACTION_DIM),
        "action_is_pad": torch.zeros(batch, HORIZON, dtype=torch.bool),
    }
    policy.train()
    for step in range(5 + steps):
        if step == 5:
            start = time.perf_counter()
        loss = policy.compute_loss(data)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        optimizer.step()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1, help="default: one per core")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    one_process_s = train_steps(args.steps, args.batch, cores)
    print(f"one process, {cores} threads: {1000 * one_process_s / args.steps:.1f} ms a step", flush=True)
    context = multiprocessing.get_context("spawn")
    started = time.perf_counter()
    with context.Pool(args.processes) as pool:
        per_process_s = pool.starmap(train_steps, [(args.steps, args.batch, 1)] * args.processes)
    side_by_side_s = time.perf_counter() - started  # includes the processes' start and policy build
    print(
        f"{args.processes} processes, 1 thread each: {1000 * max(per_process_s) / args.steps:.1f} ms a step each",
        flush=True,
    )
    one_rate = args.steps / one_process_s
    side_rate = args.processes * args.steps / max(per_process_s)
    print(
        json.dumps(
            {
                "benchmark": "parallel_training",
                "cores": cores,
                "batch": args.batch,
                "steps": args.steps,
                "one_process_steps_per_s": round(one_rate, 2),
                "side_by_side_steps_per_s": round(side_rate, 2),
                "side_by_side_wall_s_with_start": round(side_by_side_s, 1),
                "speedup": round(side_rate / one_rate, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
