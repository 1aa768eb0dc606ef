"""Diffusion policy: a denoiser predicts the noise added to a normalised action chunk.

Training uses diffusers' DDPMScheduler to noise chunks; inference runs DDIMScheduler for ``inference_steps``.
Guidance works in x̂0 space (ALGORITHMS.md): the hook's term is added to the estimated clean chunk â0, the noise is
recomputed from it, and the scheduler steps with that noise.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from diffusers.schedulers.scheduling_ddim import DDIMScheduler
from diffusers.schedulers.scheduling_ddpm import DDPMScheduler
from diffusers.schedulers.scheduling_utils import SchedulerMixin
from torch import nn
from torch.nn import functional as F

from vla_recover.policies.common.backbone import build_backbone
from vla_recover.policies.common.base import GuidanceHook, NoiseSource, Policy, draw_noise
from vla_recover.policies.diffusion.configuration_diffusion import DiffusionConfig

__all__ = ["DiffusionPolicy", "guided_sampling"]


class DiffusionPolicy(Policy):
    name = "diffusion"
    backbone_attr = "denoiser"
    config: DiffusionConfig

    def __init__(self, config: DiffusionConfig, shapes: dict[str, tuple[int, ...]], action_dim: int) -> None:
        super().__init__(config, shapes, action_dim)
        self.denoiser = build_backbone(config, action_dim, self.cond_dim)
        self._add_second_generators()
        schedule = {
            "num_train_timesteps": config.train_timesteps,
            "beta_schedule": config.beta_schedule,
            "clip_sample": config.clip_sample,
            "prediction_type": "epsilon",
        }
        self.train_scheduler = DDPMScheduler(**schedule)
        self.sample_scheduler = DDIMScheduler(**schedule)

    def compute_loss(self, batch: dict[str, torch.Tensor], weights: torch.Tensor | None = None) -> torch.Tensor:
        cond = self.encode_obs(batch)
        clean = self.normalizer.normalize("action", batch["action"].float())
        noise = torch.randn_like(clean)
        steps = torch.randint(0, self.config.train_timesteps, (clean.shape[0],), device=clean.device)
        noisy = self.train_scheduler.add_noise(clean, noise, steps)
        predicted = self.generate(batch, noisy, steps, cond)
        return self._weighted(F.mse_loss(predicted, noise, reduction="none"), batch, weights)

    def sample_actions(self, cond: torch.Tensor, generator: NoiseSource, hook: GuidanceHook | None) -> torch.Tensor:
        self.sample_scheduler.set_timesteps(self.config.inference_steps)
        shape = (cond.shape[0], self.config.action_horizon, self.action_dim)
        return guided_sampling(
            lambda x, t: self.denoiser(x, t.to(cond.device).expand(shape[0]), cond),
            self.sample_scheduler,
            shape,
            generator,
            hook,
            device=cond.device,
        )

    def clean_estimate(self, network: nn.Module, cond: torch.Tensor, index: int, noisy: torch.Tensor) -> torch.Tensor:
        t = self.sample_scheduler.timesteps[index]
        a = self.sample_scheduler.alphas_cumprod[t]
        return (noisy - (1 - a).sqrt() * network(noisy, t.to(noisy.device).expand(noisy.shape[0]), cond)) / a.sqrt()


def guided_sampling(
    denoise: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    scheduler: SchedulerMixin,
    shape: tuple[int, ...],
    generator: NoiseSource,
    hook: GuidanceHook | None,
    prediction: str = "epsilon",
    device: torch.device | None = None,
) -> torch.Tensor:
    """Run a diffusers scheduler's reverse process from noise, with the guidance hook acting on x̂0 each step.

    ``denoise(x, t)`` returns the network's prediction: the noise (``prediction="epsilon"``) or the clean chunk
    (``"sample"``). The scheduler must already have its timesteps set; ``device``: where the chunk is sampled.
    """
    x = draw_noise(shape, generator, device)
    alphas = scheduler.alphas_cumprod  # type: ignore[attr-defined]
    for index, t in enumerate(scheduler.timesteps):  # type: ignore[attr-defined]
        output = denoise(x, t)
        if hook is not None:
            a = alphas[t]
            clean = (x - (1 - a).sqrt() * output) / a.sqrt() if prediction == "epsilon" else output
            term = hook(index, x, clean)
            if term is not None:
                clean = clean + term
                output = (x - a.sqrt() * clean) / (1 - a).sqrt() if prediction == "epsilon" else clean
        x = scheduler.step(output.detach(), t, x, generator=generator).prev_sample  # type: ignore[attr-defined]
    return x
