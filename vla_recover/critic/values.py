"""Small state-value networks (the advantage weighters' and the recovery gate's) learned in seconds on a CPU."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from pydantic import Field
from torch import nn
from torch.nn import functional as F

from vla_recover.config import FrozenConfig

__all__ = ["ValueNet", "ValueTrainConfig", "fit_value"]


class ValueTrainConfig(FrozenConfig):
    hidden: tuple[int, ...] = Field(default=(128, 128), description="widths of the MLP's hidden layers")
    steps: int = Field(default=1500, ge=1, le=1_000_000, description="gradient steps")
    batch_size: int = Field(
        default=512, ge=1, le=65_536, description="states per step, drawn with replacement (at most the data's count)"
    )
    lr: float = Field(default=1e-3, gt=0.0, le=1.0, description="AdamW's initial learning rate, cosine-decayed to 0")
    weight_decay: float = Field(default=1e-4, ge=0.0, description="AdamW's weight decay")
    seed: int = Field(default=0, ge=0, description="seed of the initial weights and the batches")


class ValueNet(nn.Module):
    """An MLP from a standardised state to one scalar."""

    def __init__(self, states: np.ndarray, hidden: tuple[int, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(states.mean(0), dtype=torch.float32))
        self.register_buffer("std", torch.as_tensor(states.std(0) + 1e-6, dtype=torch.float32))
        layers: list[nn.Module] = []
        width = states.shape[1]
        for size in hidden:
            layers += [nn.Linear(width, size), nn.SiLU()]
            width = size
        layers.append(nn.Linear(width, 1))
        self.net = nn.Sequential(*layers)

    mean: torch.Tensor
    std: torch.Tensor

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return self.net((states - self.mean) / self.std).squeeze(-1)

    @torch.no_grad()
    def predict(self, states: np.ndarray, batch: int = 65_536) -> np.ndarray:
        out = [self(torch.as_tensor(states[i : i + batch])) for i in range(0, len(states), batch)]
        return torch.cat(out).numpy() if out else np.zeros(0, dtype=np.float32)


# A loss sees (predictions, the batch's row indices into the training set, the network) and returns a scalar;
# the network argument lets bootstrapped targets query the current values.
Loss = Callable[[torch.Tensor, np.ndarray, ValueNet], torch.Tensor]


def fit_value(
    states: np.ndarray, loss: Loss, config: ValueTrainConfig, fit_states: np.ndarray | None = None
) -> ValueNet:
    """Train a ValueNet on the rows of ``states`` with ``loss``; standardisation from ``fit_states`` (or ``states``)."""
    if len(states) == 0:
        raise ValueError("value training: no step to train on")
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    net = ValueNet(fit_states if fit_states is not None else states, config.hidden)
    optimizer = torch.optim.AdamW(net.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    tensor = torch.as_tensor(states, dtype=torch.float32)
    for step in range(config.steps):
        rows = rng.integers(0, len(states), size=min(config.batch_size, len(states)))
        for group in optimizer.param_groups:  # cosine decay: the last steps settle the fit
            group["lr"] = config.lr * 0.5 * (1 + np.cos(np.pi * step / config.steps))
        value = net(tensor[rows])
        optimizer.zero_grad(set_to_none=True)
        loss(value, rows, net).backward()
        optimizer.step()
    net.eval()
    return net


def bce_loss(targets: np.ndarray) -> Loss:
    target = torch.as_tensor(targets, dtype=torch.float32)
    return lambda logits, rows, _: F.binary_cross_entropy_with_logits(logits, target[rows])


def mse_loss(targets: np.ndarray) -> Loss:
    target = torch.as_tensor(targets, dtype=torch.float32)
    return lambda values, rows, _: F.mse_loss(values, target[rows])
