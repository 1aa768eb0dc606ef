"""LeRobot's DiffusionPolicy behind our `Policy` interface, so a LeRobot user can post-train it with our loop.

LeRobot's own modules do the work (observation encoders, conditional UNet, noise scheduler); this class feeds them
our batches and adds what our loop needs and LeRobot's ``forward`` does not give: per-sample loss weights and the
guidance hook. Two conventions are ours, not LeRobot's, and hold for a checkpoint loaded from ``pretrained_path``
too: normalisation statistics come from our trainer's data (``fit_normalizer``, saved in our checkpoint), and a
predicted chunk starts at the current step (LeRobot's starts ``n_obs_steps - 1`` steps back), which is how our
trainer cuts windows.

LeRobot is optional and cannot share our torch pin; this module imports it on first use, so it runs wherever
LeRobot is installed (``bash scripts/install_lerobot_venv.sh`` makes ``.venv-lerobot``).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from vla_recover.policies.common.base import GuidanceHook, NoiseSource, Policy
from vla_recover.policies.diffusion.modeling_diffusion import guided_sampling
from vla_recover.policies.lerobot.configuration_lerobot import LeRobotDiffusionConfig

__all__ = ["LeRobotDiffusionPolicy"]

_INSTALL_HINT = (
    "policy lerobot_diffusion needs LeRobot 0.4.4: bash scripts/install_lerobot_venv.sh, run in .venv-lerobot"
)


def lerobot_key(key: str) -> str:
    """Our store key → LeRobot's feature name (``obs.images.front`` → ``observation.images.front``)."""
    return "observation." + key.removeprefix("obs.")


def _build_lerobot_policy(config: LeRobotDiffusionConfig, shapes: dict[str, tuple[int, ...]], action_dim: int) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a hub id must never be fetched
    try:
        from lerobot.configs.types import FeatureType, PolicyFeature
        from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
        from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc

    if config.pretrained_path is not None:
        if not (config.pretrained_path / "config.json").is_file():
            raise FileNotFoundError(
                f"pretrained_path: {config.pretrained_path} is not a local LeRobot checkpoint (no config.json)"
            )
        return DiffusionPolicy.from_pretrained(config.pretrained_path, local_files_only=True)

    assert config.state_key is not None  # the config validator guarantees it
    state_dim = shapes[config.state_key][-1]
    robot_dims = state_dim - config.environment_state_dims
    if robot_dims < 1:
        raise ValueError(
            f"environment_state_dims: {config.environment_state_dims} leaves no robot state in {state_dim} dims"
        )
    features = {"observation.state": PolicyFeature(type=FeatureType.STATE, shape=(robot_dims,))}
    if config.environment_state_dims:
        features["observation.environment_state"] = PolicyFeature(
            type=FeatureType.ENV, shape=(config.environment_state_dims,)
        )
    for key in config.image_keys:
        height, width, channels = shapes[key]
        features[lerobot_key(key)] = PolicyFeature(type=FeatureType.VISUAL, shape=(channels, height, width))
    settings: dict[str, Any] = {
        "n_obs_steps": config.obs_horizon,
        "horizon": config.action_horizon,
        "n_action_steps": config.action_exec,
        "down_dims": tuple(config.down_dims),
        "noise_scheduler_type": "DDIM",
        "num_inference_steps": config.inference_steps,
        "crop_shape": (config.image_crop, config.image_crop) if config.image_keys else None,
        "device": "cpu",
        **config.lerobot_config,
    }
    try:
        lerobot_config = DiffusionConfig(
            input_features=features,
            output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(action_dim,))},
            **settings,
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"lerobot_config: LeRobot's DiffusionConfig rejects {settings}: {exc}") from exc
    return DiffusionPolicy(lerobot_config)


class LeRobotDiffusionPolicy(Policy):
    name = "lerobot_diffusion"
    backbone_attr = "lerobot.diffusion.unet"
    config: LeRobotDiffusionConfig

    def __init__(self, config: LeRobotDiffusionConfig, shapes: dict[str, tuple[int, ...]], action_dim: int) -> None:
        super().__init__(config, shapes, action_dim)
        self.image_encoders = nn.ModuleDict()  # LeRobot brings its own image encoder
        self.lerobot = _build_lerobot_policy(config, shapes, action_dim)
        self._check_fits(shapes, action_dim)

    def _check_fits(self, shapes: dict[str, tuple[int, ...]], action_dim: int) -> None:
        """A local LeRobot checkpoint must take our observations and produce our actions."""
        lerobot_config = self.lerobot.config
        theirs = lerobot_config.action_feature.shape[0]
        if theirs != action_dim:
            raise ValueError(
                f"pretrained_path: the LeRobot policy outputs {theirs}-d actions, the data has {action_dim}"
            )
        assert self.config.state_key is not None
        robot_dims = shapes[self.config.state_key][-1] - self.config.environment_state_dims
        if lerobot_config.robot_state_feature.shape[0] != robot_dims:
            raise ValueError(
                f"pretrained_path: the LeRobot policy takes a {lerobot_config.robot_state_feature.shape[0]}-d "
                f"observation.state, the data gives {robot_dims} (state minus environment_state_dims)"
            )
        for name in lerobot_config.image_features:
            if name.removeprefix("observation.") not in {k.removeprefix("obs.") for k in self.config.image_keys}:
                raise ValueError(
                    f"image_keys: the LeRobot policy needs {name}, image_keys has {self.config.image_keys}"
                )

    # -- conditioning: our batch → LeRobot's ----------------------------------------------------------------------
    def _lerobot_batch(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        cfg = self.config
        assert cfg.state_key is not None
        state = self.normalizer.normalize(cfg.state_key, batch[cfg.state_key].float())  # (B, To, D)
        robot_dims = state.shape[-1] - cfg.environment_state_dims
        converted = {"observation.state": state[..., :robot_dims]}
        if cfg.environment_state_dims:
            converted["observation.environment_state"] = state[..., robot_dims:]
        if cfg.image_keys:  # (B, To, H, W, 3) uint8 → (B, To, cameras, 3, H, W) in [0, 1]
            images = [batch[key].permute(0, 1, 4, 2, 3).float() / 255.0 for key in cfg.image_keys]
            converted["observation.images"] = torch.stack(images, dim=2)
        return converted

    def encode_obs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.lerobot.diffusion._prepare_global_conditioning(self._lerobot_batch(batch))

    # -- the interface ----------------------------------------------------------------------------------------
    def compute_loss(self, batch: dict[str, torch.Tensor], weights: torch.Tensor | None = None) -> torch.Tensor:
        model = self.lerobot.diffusion
        cond = self.encode_obs(batch)
        clean = self.normalizer.normalize("action", batch["action"].float())
        noise = torch.randn_like(clean)
        steps = torch.randint(
            0, model.noise_scheduler.config.num_train_timesteps, (clean.shape[0],), device=clean.device
        )
        noisy = model.noise_scheduler.add_noise(clean, noise, steps)
        predicted = model.unet(noisy, steps, global_cond=cond)
        target = noise if self.lerobot.config.prediction_type == "epsilon" else clean
        return self._weighted(F.mse_loss(predicted, target, reduction="none"), batch, weights)

    def sample_actions(self, cond: torch.Tensor, generator: NoiseSource, hook: GuidanceHook | None) -> torch.Tensor:
        model = self.lerobot.diffusion
        scheduler = model.noise_scheduler
        scheduler.set_timesteps(model.num_inference_steps)
        shape = (cond.shape[0], self.lerobot.config.horizon, self.action_dim)
        return guided_sampling(
            lambda x, t: model.unet(x, t.to(cond.device).expand(shape[0]), global_cond=cond),
            scheduler,
            shape,
            generator,
            hook,
            prediction=self.lerobot.config.prediction_type,
            device=cond.device,
        )
