"""Action-chunk policies behind one interface, registered by name.

>>> from vla_recover.policies import POLICIES, build_policy
"""

from __future__ import annotations

from typing import Any

from vla_recover.config import validate_config
from vla_recover.policies.common.base import GuidanceHook, Policy, PolicyConfig
from vla_recover.policies.diffusion.configuration_diffusion import DiffusionConfig
from vla_recover.policies.flow.configuration_flow import FlowConfig
from vla_recover.policies.lerobot.configuration_lerobot import LeRobotDiffusionConfig
from vla_recover.registry import Registry

__all__ = ["POLICIES", "GuidanceHook", "Policy", "PolicyConfig", "build_policy"]

POLICIES: Registry[PolicyConfig] = Registry("policy")
POLICIES.register(
    "diffusion", DiffusionConfig, "vla_recover.policies.diffusion.modeling_diffusion:DiffusionPolicy",
    "1D conv UNet (or transformer) denoiser, DDPM training, DDIM inference",
)  # fmt: skip
POLICIES.register(
    "flow", FlowConfig, "vla_recover.policies.flow.modeling_flow:FlowPolicy",
    "rectified-flow velocity field, few-step Euler inference",
)  # fmt: skip
POLICIES.register(
    "lerobot_diffusion", LeRobotDiffusionConfig, "vla_recover.policies.lerobot.modeling_lerobot:LeRobotDiffusionPolicy",
    "LeRobot's DiffusionPolicy (needs LeRobot installed), post-trainable with our loop",
)  # fmt: skip


def build_policy(name: str, config: Any, shapes: dict[str, tuple[int, ...]], action_dim: int) -> Policy:
    entry = POLICIES.get(name)
    cfg = validate_config(entry.config_cls, config, source=f"policy {name}")
    policy: Policy = entry.load()(cfg, shapes, action_dim)
    return policy
