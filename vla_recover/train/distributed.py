"""Training on several processes with PyTorch's DistributedDataParallel, launched by ``torchrun``.

``torchrun --nproc-per-node N -m vla_recover train --config C`` (or ``vla-recover train --nproc-per-node N``) runs the
same config on N processes, on one machine or several (``--nnodes``, ``--rdzv-endpoint``): NCCL between GPUs, gloo
on CPUs. What changes against one process:

- ``batch_size`` is the global batch: each rank draws ``batch_size / N`` windows, from its own seed stream
  (`rank_seed`), and its training noise from its own torch seed;
- the loss each rank backpropagates is its rows' weighted sum over the global row count (`global_share`), so after
  DDP averages the gradients, every row of the global batch counts as it would in one process, however many rows a
  rank holds (a recovery head's copies make the ranks' batches differ);
- rank 0 alone writes metrics, checkpoints and plots; a checkpoint holds every rank's sampler and torch random state,
  so a resumed run draws what the interrupted one would have.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import distributed as dist

__all__ = ["Ranks", "gather_states", "global_share", "mean_over_ranks", "rank_seed", "start_ranks"]


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        """The rank that writes files and talks to the user."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1


def start_ranks(device: torch.device) -> tuple[Ranks, torch.device]:
    """This process's place among torchrun's (one process alone without torchrun) and the device it trains on: a
    CUDA rank takes the GPU of its local rank."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Ranks(), device
    ranks = Ranks(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))
    if device.type == "cuda":
        device = torch.device("cuda", ranks.local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return ranks, device


def rank_seed(seed: int, rank: int) -> int:
    """Rank 0 keeps the config's seed (one process draws what rank 0 of many does); the others get independent
    streams."""
    if rank == 0:
        return seed
    return int(np.random.SeedSequence([seed, rank]).generate_state(1)[0])


def global_share(loss: torch.Tensor, rows: int, ranks: Ranks) -> torch.Tensor:
    """``loss`` (this rank's weighted mean over its ``rows``) rescaled so that DDP's gradient average is the weighted
    mean over the global batch: ``sum_rank(rows · mean) / sum_rank(rows)``."""
    if not ranks.distributed:
        return loss
    total = torch.tensor([float(rows)], device=loss.device)
    dist.all_reduce(total)
    return loss * (rows * ranks.world / float(total.item()))


def mean_over_ranks(value: float, ranks: Ranks, device: torch.device) -> float:
    if not ranks.distributed:
        return value
    total = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(total)
    return float(total.item()) / ranks.world


def gather_states(state: Any, ranks: Ranks) -> list[Any]:
    """Every rank's ``state`` (any picklable object), in rank order, on every rank."""
    if not ranks.distributed:
        return [state]
    states: list[Any] = [None] * ranks.world
    dist.all_gather_object(states, state)
    return states


def barrier(ranks: Ranks) -> None:
    if ranks.distributed:
        dist.barrier()


def stop_ranks(ranks: Ranks) -> None:
    if ranks.distributed and dist.is_initialized():
        dist.destroy_process_group()
