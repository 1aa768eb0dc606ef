"""Flow-matching policy: x_τ = (1 - τ)·noise + τ·action, the network predicts v = action - noise.

Inference integrates dx/dτ = v from noise at τ = 0 to an action chunk at τ = 1 with a few Euler steps. Guidance
acts on the predicted endpoint â1 = x_τ + (1 - τ)·v, the flow analogue of x̂0 guidance.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from vla_recover.policies.common.backbone import build_backbone
from vla_recover.policies.common.base import GuidanceHook, NoiseSource, Policy, draw_noise
from vla_recover.policies.flow.configuration_flow import FlowConfig

__all__ = ["FlowPolicy"]

_TIME_SCALE = 1000.0  # τ in [0, 1] → the step embedding's range


class FlowPolicy(Policy):
    name = "flow"
    backbone_attr = "velocity"
    config: FlowConfig

    def __init__(self, config: FlowConfig, shapes: dict[str, tuple[int, ...]], action_dim: int) -> None:
        super().__init__(config, shapes, action_dim)
        self.velocity = build_backbone(config, action_dim, self.cond_dim)
        self._add_second_generators()

    def _sample_time(self, n: int) -> torch.Tensor:
        if self.config.time_sampling == "beta":
            return (1.0 - torch.distributions.Beta(1.5, 1.0).sample((n,)) * 0.999).to(self.device)
        return torch.rand(n, device=self.device)

    def compute_loss(self, batch: dict[str, torch.Tensor], weights: torch.Tensor | None = None) -> torch.Tensor:
        cond = self.encode_obs(batch)
        target = self.normalizer.normalize("action", batch["action"].float())
        noise = torch.randn_like(target)
        tau = self._sample_time(target.shape[0])
        x = (1 - tau)[:, None, None] * noise + tau[:, None, None] * target
        predicted = self.generate(batch, x, tau * _TIME_SCALE, cond)
        return self._weighted(F.mse_loss(predicted, target - noise, reduction="none"), batch, weights)

    def sample_actions(self, cond: torch.Tensor, generator: NoiseSource, hook: GuidanceHook | None) -> torch.Tensor:
        steps = self.config.inference_steps
        shape = (cond.shape[0], self.config.action_horizon, self.action_dim)
        x = draw_noise(shape, generator, cond.device)
        dt = 1.0 / steps
        for index in range(steps):
            tau = torch.full((shape[0],), index * dt, device=x.device)
            v = self.velocity(x, tau * _TIME_SCALE, cond)
            if hook is not None:
                remaining = 1.0 - index * dt
                endpoint = x + remaining * v
                term = hook(index, x, endpoint)
                if term is not None:
                    v = (endpoint + term - x) / remaining
            x = (x + dt * v).detach()
        return x

    def clean_estimate(self, network: nn.Module, cond: torch.Tensor, index: int, noisy: torch.Tensor) -> torch.Tensor:
        tau = index / self.config.inference_steps
        velocity = network(noisy, torch.full((noisy.shape[0],), tau * _TIME_SCALE, device=noisy.device), cond)
        return noisy + (1.0 - tau) * velocity
