"""The config of policies that sample by denoising or integrating (diffusion, flow): what they add to every policy's
fields, the second generators they may carry."""

from __future__ import annotations

from pydantic import Field, model_validator

from vla_recover.policies.common.base import PolicyConfig
from vla_recover.policies.common.failure_guidance import FailureGuidanceConfig
from vla_recover.policies.common.recovery_head import RecoveryHeadConfig

__all__ = ["GenerativePolicyConfig"]


class GenerativePolicyConfig(PolicyConfig):
    """Fields of an iterative sampler's policy: at most one second generator over the same conditioning."""

    failure_guidance: FailureGuidanceConfig | None = Field(
        None,
        description="AFIL: a second generator trained on failed behaviour steers sampling away from it "
        "(policies/common/failure_guidance.py); None: one generator",
    )
    recovery: RecoveryHeadConfig | None = Field(
        None,
        description="EgoRecovery: a recovery head trained on human corrections, switched in per chunk by a gate "
        "learned from the fleet's failures (policies/common/recovery_head.py); None: one generator",
    )

    @model_validator(mode="after")
    def _one_second_generator(self) -> GenerativePolicyConfig:
        if self.failure_guidance is not None and self.recovery is not None:
            raise ValueError("failure_guidance / recovery: a policy carries at most one second generator; give one")
        return self
