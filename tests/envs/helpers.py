"""Run expert episodes and record what the contract tests look at."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vla_recover.envs import make_expert, make_task
from vla_recover.envs.expert import ExpertConfig


@dataclass
class Trace:
    states: list[np.ndarray] = field(default_factory=list)
    progress: list[float] = field(default_factory=list)
    phases: list[int] = field(default_factory=list)
    success: bool = False
    length: int = 0
    failure_steps: list[int] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


def run_expert(
    task: str,
    seed: int,
    config: dict[str, Any] | None = None,
    env: Any = None,
    expert_config: dict[str, Any] | None = None,
) -> Trace:
    env = env or make_task(task, config)
    obs, info = env.reset(seed=seed)
    expert = make_expert(task, env, ExpertConfig(**(expert_config or {})), seed=seed)
    trace = Trace(states=[obs["state"]], progress=[info["progress"]], phases=[info["phase_index"]])
    while True:
        obs, _, terminated, truncated, info = env.step(expert())
        trace.states.append(obs["state"])
        trace.progress.append(info["progress"])
        trace.phases.append(info["phase_index"])
        if info["failure"]:
            trace.failure_steps.append(info["step"] - 1)
        if terminated or truncated:
            break
    trace.success, trace.length, trace.info = bool(info["is_success"]), len(trace.states) - 1, info
    return trace
