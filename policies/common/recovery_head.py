"""EgoRecovery's recovery-gated policy: a recovery head trained on human corrections, switched in by a learned gate.

A policy whose config sets ``recovery`` carries a second generator of its own shape over the same conditioning and
a recovery gate: an MLP from the latest state and its change since the step before to P(needs correction), trained
on the fleet's recorded failures (``vla_recover.recovery``) with its threshold, and stored with the policy's
weights. Which rows train the head is ``head_rows``: the human corrections (the nominal generator trains on
everything the data rule keeps, the corrections included unless ``nominal_learns_corrections`` is false), or the
rows whose state the gate flags (the nominal generator on the others), so that each generator learns the states it
will be sampled in. For each chunk, rows the gate flags are sampled from the recovery head and the others from
the nominal generator; the switch goes through the sampling hook (the head's clean-chunk estimate replaces the
nominal one on those rows at every step, which is sampling from the head), so evaluation, the fleet and the ROS 2
node need nothing new. Where the paper is silent, the choices: the gate decides per chunk, from the observation the
chunk is planned from; it sees states, not images.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from pydantic import Field, model_validator
from torch import nn

from vla_recover.config import FrozenConfig
from vla_recover.policies.common.base import GuidanceHook, then_hook

__all__ = ["RecoveryGateNet", "RecoveryHeadConfig", "gate_input_dim", "recovery_switch_hook"]


class RecoveryHeadConfig(FrozenConfig):
    """The recovery head's gate: its network and how it is trained (the head itself has the policy's shape)."""

    nominal_learns_corrections: bool = Field(
        default=True,
        description="the nominal generator learns the human corrections too (the policy without its gate is the "
        "same data's one-generator policy); false: it learns only what is not a correction",
    )
    head_rows: Literal["corrections", "gate"] = Field(
        default="corrections",
        description="what trains the head: corrections, the human correction rows; gate, every training row whose "
        "state the gate flags (the nominal generator learns the rest), as the gate routes chunks when sampling",
    )
    gate_hidden: tuple[int, ...] = Field(default=(128, 128), description="widths of the gate's hidden layers")
    use_delta: bool = Field(default=True, description="the gate also reads the state's change since the step before")
    gate_steps: int = Field(default=2000, ge=1, le=1_000_000, description="gradient steps of the gate's training")
    target_precision: float = Field(
        default=0.7,
        gt=0.0,
        le=1.0,
        description="the gate's threshold: the most recall at this precision on held-back fleet episodes",
    )

    @model_validator(mode="after")
    def _rows_agree(self) -> RecoveryHeadConfig:
        if self.head_rows == "gate" and not self.nominal_learns_corrections:
            raise ValueError(
                "nominal_learns_corrections: false splits the corrections from the nominal rows; with head_rows: "
                "gate the gate splits every row, so leave it at its default (true)"
            )
        return self


class RecoveryGateNet(nn.Module):
    """The gate inside a policy: standardised features → logit, with the threshold it switches at."""

    mean: torch.Tensor
    std: torch.Tensor
    threshold: torch.Tensor

    def __init__(self, input_dim: int, hidden: tuple[int, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(input_dim))
        self.register_buffer("std", torch.ones(input_dim))
        self.register_buffer("threshold", torch.tensor(0.5))
        layers: list[nn.Module] = []
        width = input_dim
        for size in hidden:
            layers += [nn.Linear(width, size), nn.SiLU()]
            width = size
        layers.append(nn.Linear(width, 1))
        self.net = nn.Sequential(*layers)
        self.requires_grad_(False)  # trained apart (vla_recover.recovery.train_gate), never by the policy's loss

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net((features - self.mean) / self.std).squeeze(-1)

    def rows(self, states: torch.Tensor, use_delta: bool) -> torch.Tensor:
        """(B,) bool for observation windows (B, To, D): the gate flags the latest state."""
        latest = states[:, -1].float()
        features = latest
        if use_delta:
            previous = states[:, -2].float() if states.shape[1] > 1 else latest
            features = torch.cat([latest, latest - previous], dim=-1)
        return torch.sigmoid(self(features)) >= self.threshold

    def load_trained(self, state: dict[str, torch.Tensor], threshold: float) -> None:
        """Weights of a trained ``vla_recover.recovery.RecoveryGate`` network (its ``state_dict``)."""
        self.load_state_dict({**state, "threshold": torch.tensor(float(threshold))}, strict=True)


def recovery_switch_hook(
    recovery_estimate: Callable[[int, torch.Tensor], torch.Tensor], rows: torch.Tensor, then: GuidanceHook | None
) -> GuidanceHook:
    """Replace the clean-chunk estimate by the recovery head's on ``rows`` (B,) at every sampling step."""
    mask = rows.to(torch.float32)[:, None, None]

    def switch(index: int, noisy: torch.Tensor, clean: torch.Tensor) -> torch.Tensor | None:
        with torch.no_grad():
            term = mask * (recovery_estimate(index, noisy.detach()) - clean.detach())
        return then_hook(term, then, index, noisy, clean)

    return switch


def gate_input_dim(state_dim: int, use_delta: bool) -> int:
    return state_dim * (2 if use_delta else 1)
