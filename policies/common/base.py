"""The `Policy` interface every policy implements, and the observation conditioning they share.

Batches are dicts of tensors: ``obs.state`` (B, To, D), ``obs.images.<cam>`` (B, To, H, W, 3) uint8, optionally
``instruction_embedding`` (B, 384), ``action`` (B, H, A) and ``action_is_pad`` (B, H) for training.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import nn

from vla_recover.config import FrozenConfig
from vla_recover.policies.common.encoders import TEXT_EMBED_DIM, ImageEncoder
from vla_recover.policies.common.normalizer import Normalizer
from vla_recover.policies.common.tracing import trace_on_first_call, untrace

if TYPE_CHECKING:
    from vla_recover.policies.common.recovery_head import RecoveryGateNet

__all__ = ["GuidanceHook", "NoiseSource", "Policy", "PolicyConfig", "draw_noise", "route_rows", "then_hook"]

# A sampling hook sees, at each denoising / integration step, the step index, the current noisy action chunk and the
# estimated clean chunk (both (B, H, A), normalised space) and returns a term added to the clean estimate, or None.
GuidanceHook = Callable[[int, torch.Tensor, torch.Tensor], "torch.Tensor | None"]


def then_hook(
    term: torch.Tensor, then: GuidanceHook | None, index: int, noisy: torch.Tensor, clean: torch.Tensor
) -> torch.Tensor:
    """A hook's ``term`` plus what the next hook ``then`` adds to the estimate ``term`` moved: hooks in a chain."""
    if then is None:
        return term
    extra = then(index, noisy, clean + term)
    return term if extra is None else term + extra


# Where sampling noise comes from: torch's global generator (None), one generator for the batch, or one per row. With
# one per row, a row's chunk does not depend on which other rows share its batch, so an evaluation's results do not
# depend on its batch size or worker count.
NoiseSource = torch.Generator | list[torch.Generator] | None


def draw_noise(shape: tuple[int, ...], generator: NoiseSource, device: torch.device | None = None) -> torch.Tensor:
    """Standard normal noise of ``shape`` on ``device``; with one generator per row, row i is drawn from generator i
    alone. Drawn on the CPU and moved, so a seed gives the same noise on every device."""
    if not isinstance(generator, list):
        noise = torch.randn(shape, generator=generator)
    elif len(generator) != shape[0]:  # the only way a list comes here: predict_chunk's seeds, one per row
        raise ValueError(f"seed: got {len(generator)} seeds for a batch of {shape[0]}")
    else:
        noise = torch.stack([torch.randn(shape[1:], generator=row) for row in generator])
    return noise if device is None else noise.to(device)


class PolicyConfig(FrozenConfig):
    """Fields every action-chunk policy shares."""

    obs_horizon: int = Field(2, ge=1, le=16, description="observation steps the policy is conditioned on")
    action_horizon: int = Field(
        16,
        ge=1,
        le=128,
        description="actions in each predicted chunk; the unet needs a multiple of 2**(len(down_dims)-1)",
    )
    action_exec: int = Field(8, ge=1, le=128, description="actions executed from each predicted chunk")
    state_key: str | None = Field("obs.state", description="low-dim state input; None: images only")
    image_keys: tuple[str, ...] = Field(default=(), description="camera inputs (obs.images.<cam>); none: state only")
    image_crop: int = Field(
        76,
        ge=8,
        le=1024,
        description="pixels of the square crop each image encoder sees (random in training, centred otherwise)",
    )
    image_feature_dim: int = Field(64, ge=8, le=1024, description="features per image and observation step")
    use_language: bool = Field(False, description="condition on the instruction's sentence embedding")
    backbone: Literal["unet", "transformer"] = Field(
        "unet", description="the denoising network: a 1-D conditional unet or a transformer over the chunk"
    )
    down_dims: tuple[int, ...] = Field(default=(64, 128, 256), description="unet: channels of each downsampling level")
    transformer_dim: int = Field(128, ge=16, le=2048, description="transformer: model width")
    transformer_layers: int = Field(4, ge=1, le=24, description="transformer: encoder layers")

    @model_validator(mode="after")
    def _consistent(self) -> PolicyConfig:
        if self.action_exec > self.action_horizon:
            raise ValueError(f"action_exec ({self.action_exec}) must be <= action_horizon ({self.action_horizon})")
        if self.backbone == "unet" and self.action_horizon % 2 ** (len(self.down_dims) - 1):
            raise ValueError(
                f"action_horizon ({self.action_horizon}) must be divisible by 2**(len(down_dims)-1) "
                f"= {2 ** (len(self.down_dims) - 1)} for the unet backbone"
            )
        if self.state_key is None and not self.image_keys:
            raise ValueError("a policy needs state_key or image_keys")
        return self


class Policy(nn.Module, abc.ABC):
    """An action-chunk policy: conditioning on an observation window, a generative head over action chunks."""

    name: str = ""
    backbone_attr: str = ""  # the (dotted) submodule path of the denoising network
    config: PolicyConfig

    def __init__(self, config: PolicyConfig, shapes: dict[str, tuple[int, ...]], action_dim: int) -> None:
        super().__init__()
        self.config = config
        self.shapes = dict(shapes)
        self.action_dim = action_dim
        self.recovery_gate: RecoveryGateNet | None = None  # a recovery head's gate (_add_second_generators)
        norm_dims = {"action": action_dim}
        if config.state_key:
            norm_dims[config.state_key] = shapes[config.state_key][-1]
        self.normalizer = Normalizer(norm_dims)
        self.image_encoders = nn.ModuleDict(
            {
                key.replace(".", "__"): ImageEncoder(shapes[key][0], config.image_crop, config.image_feature_dim)
                for key in config.image_keys
            }
        )
        per_step = (shapes[config.state_key][-1] if config.state_key else 0) + config.image_feature_dim * len(
            config.image_keys
        )
        self.cond_dim = per_step * config.obs_horizon + (TEXT_EMBED_DIM if config.use_language else 0)

    # -- conditioning ---------------------------------------------------------------------------------------------
    def encode_obs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Observation window → global condition (B, cond_dim)."""
        parts = []
        cfg = self.config
        if cfg.state_key:
            state = batch[cfg.state_key].float()
            parts.append(self.normalizer.normalize(cfg.state_key, state).flatten(1))
        for key in cfg.image_keys:
            images = batch[key]  # (B, To, H, W, 3)
            b, t = images.shape[:2]
            features = self.image_encoders[key.replace(".", "__")](images.reshape(b * t, *images.shape[2:]))
            parts.append(features.reshape(b, -1))
        if cfg.use_language:
            parts.append(batch["instruction_embedding"].float())
        return torch.cat(parts, dim=-1)

    def fit_normalizer(self, data: dict[str, np.ndarray]) -> None:
        """Statistics from training data: ``action`` (N, A) and the state key (N, D)."""
        for key in self.normalizer.keys:
            self.normalizer.fit(key, data[key])

    @property
    def device(self) -> torch.device:
        """Where the policy's weights are (`Checkpoint.load(device)`, ``policy.to(device)``); inputs are moved there."""
        return self.normalizer.device

    def forward(self, batch: dict[str, torch.Tensor], weights: torch.Tensor | None = None) -> torch.Tensor:
        """The training loss (`compute_loss`), as LeRobot's policies answer a call: what DDP wraps."""
        return self.compute_loss(batch, weights)

    # -- the interface ----------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def compute_loss(self, batch: dict[str, torch.Tensor], weights: torch.Tensor | None = None) -> torch.Tensor:
        """Weighted training loss: ``sum_i w_i * loss_i / B`` over the batch; padded actions do not count."""

    @abc.abstractmethod
    def sample_actions(self, cond: torch.Tensor, generator: NoiseSource, hook: GuidanceHook | None) -> torch.Tensor:
        """Normalised action chunks (B, H, A) for conditions (B, C); noise comes from ``draw_noise``."""

    @torch.no_grad()
    def predict_chunk(
        self, batch: dict[str, Any], seed: int | Sequence[int] | None = None, hook: GuidanceHook | None = None
    ) -> np.ndarray:
        """Action chunks (B, H, A) in the environment's units. Deterministic for a given ``seed``; a sequence of
        seeds, one per row, makes each row's chunk its own seed's whatever else is in the batch."""
        was_training = self.training
        if was_training:  # train() walks every submodule: 7 ms a call on the fleet's policy, not worth paying twice
            self.eval()
        tensors = {k: torch.as_tensor(v).to(self.device) for k, v in batch.items()}
        cond = self.encode_obs(tensors)
        hook = self.sampling_hook(tensors, cond, hook)
        generator: NoiseSource = None
        if isinstance(seed, int | np.integer):
            generator = torch.Generator().manual_seed(int(seed))
        elif seed is not None:  # draw_noise checks there is one per row
            generator = [torch.Generator().manual_seed(int(row)) for row in seed]
        if hook is None:
            actions = self.sample_actions(cond, generator, None)
        else:
            with torch.enable_grad():
                actions = self.sample_actions(cond, generator, hook)
        if was_training:
            self.train()
        return self.normalizer.unnormalize("action", actions.detach()).cpu().numpy()

    # -- second generators: AFIL's failure generator, EgoRecovery's recovery head ----------------------------------
    def _add_second_generators(self) -> None:
        """``failure_<backbone_attr>`` and ``recovery_<backbone_attr>`` (networks of the policy's own shape over the
        same conditioning) and the recovery gate, where the config asks for them; after the subclass built its own."""
        from vla_recover.policies.common.backbone import build_backbone
        from vla_recover.policies.common.recovery_head import RecoveryGateNet, gate_input_dim

        config = self.config
        for role in ("failure", "recovery"):
            wanted = getattr(config, _ROLE_OPTION[role], None) is not None
            network = build_backbone(config, self.action_dim, self.cond_dim) if wanted else None
            setattr(self, f"{role}_{self.backbone_attr}", network)
        recovery = getattr(config, "recovery", None)
        if recovery is not None:
            if not config.state_key:
                raise ValueError("recovery: the recovery gate reads the state; the policy needs state_key")
            dim = gate_input_dim(self.shapes[config.state_key][-1], recovery.use_delta)
            self.recovery_gate = RecoveryGateNet(dim, recovery.gate_hidden)

    def second_generator(self, role: str) -> nn.Module | None:
        """The ``failure`` or ``recovery`` generator, when the config asks for one."""
        module = getattr(self, f"{role}_{self.backbone_attr}", None)
        return module if isinstance(module, nn.Module) else None

    @property
    def failure_generator(self) -> nn.Module | None:
        """AFIL's failure generator (``failure_<backbone_attr>``), when the config asks for one."""
        return self.second_generator("failure")

    @property
    def recovery_generator(self) -> nn.Module | None:
        """The recovery head (``recovery_<backbone_attr>``), when the config asks for one."""
        return self.second_generator("recovery")

    def clean_estimate(self, network: nn.Module, cond: torch.Tensor, index: int, noisy: torch.Tensor) -> torch.Tensor:
        """The clean chunk ``network`` (the policy's own generator or one of its shape) estimates from ``noisy`` at
        sampling step ``index``; what a second generator's guidance compares."""
        raise NotImplementedError(f"{self.name}: this policy has no second generators")

    def sampling_hook(
        self, batch: dict[str, torch.Tensor], cond: torch.Tensor, hook: GuidanceHook | None
    ) -> GuidanceHook | None:
        """``hook`` with the policy's own second generators around it: the recovery head switched in on the rows
        its gate flags, AFIL's guidance away from the failure generator."""
        from functools import partial

        from vla_recover.policies.common.failure_guidance import failure_guidance_hook
        from vla_recover.policies.common.recovery_head import recovery_switch_hook

        recovery, head = getattr(self.config, "recovery", None), self.recovery_generator
        if recovery is not None and head is not None and self.recovery_gate is not None and self.config.state_key:
            rows = self.recovery_gate.rows(batch[self.config.state_key], recovery.use_delta)
            if bool(rows.any()):
                hook = recovery_switch_hook(partial(self.clean_estimate, head, cond), rows, hook)
        guidance, failure = getattr(self.config, "failure_guidance", None), self.failure_generator
        if guidance is not None and failure is not None and guidance.scale > 0:
            hook = failure_guidance_hook(guidance, partial(self.clean_estimate, failure, cond), hook)
        return hook

    def generate(self, batch: dict[str, torch.Tensor], *inputs: torch.Tensor) -> torch.Tensor:
        """The training prediction: the policy's own generator on its rows, a second generator on the rows the
        batch flags for it (``failure`` or ``recovery``, (B,) bool)."""
        own = self.get_submodule(self.backbone_attr)
        for role in ("failure", "recovery"):
            if role in batch:
                return route_rows(own, self.second_generator(role), batch[role], role, *inputs)
        return own(*inputs)

    def trace_networks(self) -> None:
        """Sample through TorchScript traces of the denoising network and any second generators from the next call on
        (`vla_recover.policies.common.tracing`: the same weights, under half the time a pass on the CPU); a call in
        training mode runs the network itself, and ``train()`` gives the networks their own forward back."""
        for network in self._generators():
            trace_on_first_call(network)

    def train(self, mode: bool = True) -> Policy:
        if mode:
            for network in self._generators():
                untrace(network)
        return super().train(mode)

    def _generators(self) -> list[nn.Module]:
        if not self.backbone_attr:
            return []
        second = [self.second_generator(role) for role in ("failure", "recovery")]
        return [self.get_submodule(self.backbone_attr), *(network for network in second if network is not None)]

    def compile_backbone(self) -> None:
        """``torch.compile`` the denoising network in place; the state dict keeps its keys.

        On CPU this roughly halves chunk latency at batch 1 and trains ~10% faster (benchmarks/policy_speed.py).
        Each new input shape pays a one-off compile of seconds to a minute (shapes are specialised, not dynamic:
        callers with varying batch sizes should pad to a few fixed sizes), so long runs (training, fleet, robot
        node) gain and short scripts do not.
        """
        self.get_submodule(self.backbone_attr).compile(dynamic=False)

    # -- shared loss plumbing ----------------------------------------------------------------------------------------
    def _weighted(
        self, per_element: torch.Tensor, batch: dict[str, torch.Tensor], weights: torch.Tensor | None
    ) -> torch.Tensor:
        """Reduce (B, H, A) losses to one scalar with padding masked and per-sample weights applied."""
        mask = torch.ones(per_element.shape[:2], dtype=per_element.dtype, device=per_element.device)
        if "action_is_pad" in batch:
            mask = (~batch["action_is_pad"].bool()).to(per_element.dtype)
        per_sample = (per_element.mean(-1) * mask).sum(1) / mask.sum(1).clamp_min(1.0)
        if weights is None:
            return per_sample.mean()
        weights = torch.as_tensor(weights, dtype=per_sample.dtype, device=per_sample.device)
        if weights.shape != per_sample.shape:
            raise ValueError(f"weights: expected shape {tuple(per_sample.shape)}, got {tuple(weights.shape)}")
        if not torch.isfinite(weights).all() or (weights < 0).any():
            raise ValueError("weights: must be finite and non-negative")
        if float(weights.sum()) == 0.0:
            raise ValueError("weights: all zero; the batch carries no training signal (check the weighter's output)")
        return (weights * per_sample).mean()


_ROLE_OPTION = {"failure": "failure_guidance", "recovery": "recovery"}  # each second generator's config field


def route_rows(
    network: nn.Module, second: nn.Module | None, flagged: torch.Tensor, role: str, *inputs: torch.Tensor
) -> torch.Tensor:
    """``network(*inputs)`` on the rows ``flagged`` (B,) leaves out and ``second(*inputs)`` on those it marks, each
    network seeing only its own rows."""
    if not bool(flagged.any()):
        return network(*inputs)
    if second is None:
        raise ValueError(f"batch: it has {role} rows but the policy has no {role} generator")
    flagged = flagged.bool()
    out: torch.Tensor | None = None
    for rows, net in ((~flagged, network), (flagged, second)):
        if not bool(rows.any()):
            continue
        part = net(*(x[rows] for x in inputs))
        if out is None:
            out = part.new_empty((flagged.shape[0], *part.shape[1:]))
        out[rows] = part
    assert out is not None
    return out
