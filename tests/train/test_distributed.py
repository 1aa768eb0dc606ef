"""Training on two processes (torchrun, DDP over gloo on this CPU machine): the same loss as one process at the same
global batch, and a run killed mid-way resumes to the final loss of one that was not."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.train.test_train import lift_store  # noqa: F401  (the module's store fixture)
from vla_recover.train.distributed import Ranks, global_share, rank_seed
from vla_recover.train.trainer import TrainConfig, Trainer

STEPS = 100


def _config(data: Path, out: Path) -> dict[str, object]:
    return {
        "policy": "flow",
        "policy_config": {"down_dims": [16, 32], "action_horizon": 8, "action_exec": 4},
        "data": str(data),
        "out": str(out),
        "steps": STEPS,
        "batch_size": 64,
        "lr": 1e-3,
        "warmup_steps": 10,
        "log_every": 5,
        "save_every": 20,
        "threads": 1,
    }


def _train_on_two(config: Path, out: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "vla_recover", "train", "--config", str(config), "--nproc-per-node", "2"]
    log = (out.parent / f"{out.name}.log").open("wb")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _losses(out: Path) -> list[float]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in records if "loss" in r]


def _last_fifth(losses: list[float]) -> float:
    return float(np.mean(losses[-len(losses) // 5 :]))


@pytest.mark.slow
def test_two_processes_train_as_one_and_a_killed_run_resumes_to_the_same_loss(
    lift_store: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    one = Trainer(TrainConfig.model_validate(_config(lift_store, tmp_path / "one")))
    one.run()
    single = _last_fifth([r["loss"] for r in one.history])

    paths = {}
    for name in ("two", "killed"):
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(yaml.safe_dump(_config(lift_store, tmp_path / name)))
    straight = _train_on_two(paths["two"], tmp_path / "two")
    assert straight.wait(timeout=300) == 0, (tmp_path / "two.log").read_text()[-3000:]
    two = _losses(tmp_path / "two")
    assert len(two) == STEPS // 5
    print(f"mean loss over the last fifth: one process {single:.4f}, two {_last_fifth(two):.4f}")
    assert abs(_last_fifth(two) - single) <= 0.05 * single, (two, single)
    assert not (tmp_path / "two" / "checkpoints" / "rank1").exists()  # rank 0 alone writes
    assert (tmp_path / "two" / "policy" / "model.safetensors").is_file()

    killed = _train_on_two(paths["killed"], tmp_path / "killed")
    halfway = tmp_path / "killed" / "checkpoints" / "step_00000040"
    deadline = time.monotonic() + 300
    while not (halfway / "train_state.json").is_file() and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(killed.pid, signal.SIGKILL)  # both ranks and their launcher, wherever they are in step 40 to 100
    killed.wait()
    finished = (tmp_path / "killed" / "latest").read_text().strip()
    assert finished != f"step_{STEPS:08d}", "the run finished before it could be killed"
    resumed = _train_on_two(paths["killed"], tmp_path / "killed")
    assert resumed.wait(timeout=300) == 0, (tmp_path / "killed.log").read_text()[-3000:]
    assert _losses(tmp_path / "killed")[-1] == pytest.approx(two[-1], rel=1e-5)


def _scaled_loss(rank: int, store: str, results: dict[int, float]) -> None:
    import torch
    from torch import distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    rows, mean = (3, 1.0) if rank == 0 else (5, 3.0)  # a rank with recovery copies holds more rows
    results[rank] = float(global_share(torch.tensor(mean), rows, Ranks(rank, 2)))
    dist.destroy_process_group()


@pytest.mark.slow
def test_each_rank_counts_its_rows_in_the_global_batch(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    assert rank_seed(7, 0) == 7 and len({rank_seed(7, rank) for rank in range(4)}) == 4
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_scaled_loss, args=(str(tmp_path / "rendezvous"), results), nprocs=2)
        scaled = dict(results)
    # DDP averages the two ranks: (3 rows at 1.0 + 5 rows at 3.0) / 8 rows, as one process would weigh them
    assert (scaled[0] + scaled[1]) / 2 == pytest.approx((3 * 1.0 + 5 * 3.0) / 8)
