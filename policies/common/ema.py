"""Exponential moving average of weights, with diffusion_policy's warm-up schedule for the decay."""

from __future__ import annotations

import copy

import torch
from torch import nn

__all__ = ["EMA"]


class EMA:
    """``decay_t = min(max_decay, 1 - (1 + t / inv_gamma) ** -power)``: small early, so the average tracks."""

    def __init__(self, model: nn.Module, max_decay: float = 0.9999, power: float = 0.75, inv_gamma: float = 1.0):
        self.model = copy.deepcopy(model).eval().requires_grad_(False)
        self.max_decay, self.power, self.inv_gamma = max_decay, power, inv_gamma
        self.step = 0

    def decay(self) -> float:
        value = 1.0 - (1.0 + self.step / self.inv_gamma) ** -self.power
        return max(0.0, min(self.max_decay, value))

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        averages: list[torch.Tensor] = list(self.model.parameters())
        torch._foreach_lerp_(averages, [p.detach() for p in model.parameters()], 1.0 - self.decay())
        for kept, live in zip(self.model.buffers(), model.buffers(), strict=True):
            kept.copy_(live)
        self.step += 1
