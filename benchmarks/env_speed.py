"""Task speed and scripted-expert quality.

For each task: control steps/s with rendering off and on (one 84x84 front camera), raw ``mj_step``/s of the same
model (the physical limit), and scripted-expert success over N seeds. Last line: one JSON object.

    python benchmarks/env_speed.py [--tasks LiftCube PegInsert] [--episodes 100] [--steps 2000]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from vla_recover.envs import TASKS, make_expert, make_task
from vla_recover.envs.config import MujocoTaskConfig


def control_steps_per_s(task: str, steps: int, config: dict[str, Any] | None = None) -> float:
    env = make_task(task, config)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, size=(steps, env.action_space.shape[0])).astype(np.float32)
    env.reset(seed=0)
    env.step(actions[0])  # warm-up (renderer and JIT creation)
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    elapsed = time.perf_counter() - start
    env.close()
    return steps / elapsed


def raw_mj_steps_per_s(task: str, steps: int) -> float:
    import mujoco  # after vla_recover, which picks MuJoCo's headless GL backend

    env = make_task(task)
    env.reset(seed=0)
    unwrapped: Any = env.unwrapped
    model, data = _mujoco_handles(unwrapped)
    start = time.perf_counter()
    mujoco.mj_step(model, data, nstep=steps)
    return steps / (time.perf_counter() - start)


def _mujoco_handles(env: Any) -> tuple[Any, Any]:
    import mujoco

    if hasattr(env, "model") and isinstance(env.model, mujoco.MjModel):
        return env.model, env.data
    sim = env.sim  # robosuite adapter
    return sim.model._model, sim.data._data


def expert_success(task: str, episodes: int) -> dict[str, float]:
    env = make_task(task)
    successes, lengths = 0, []
    for seed in range(episodes):
        env.reset(seed=seed)
        expert = make_expert(task, env, seed=seed)
        length = 0
        while True:
            _, _, terminated, truncated, info = env.step(expert())
            length += 1
            if terminated or truncated:
                break
        successes += bool(info["is_success"])
        lengths.append(length)
    return {"expert_success": successes / episodes, "expert_mean_length": float(np.mean(lengths))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="*", default=None, help="task names (default: every registered task)")
    parser.add_argument("--episodes", type=int, default=100, help="expert episodes (seeds) per task")
    parser.add_argument("--steps", type=int, default=2000, help="control steps timed per task, rendering off")
    parser.add_argument("--render-steps", type=int, default=300, help="control steps timed with rendering on")
    args = parser.parse_args()

    results: dict[str, Any] = {}
    for entry in TASKS:
        if args.tasks and entry.name not in args.tasks:
            continue
        try:
            entry.load()
        except ImportError as exc:
            results[entry.name] = {"skipped": f"{exc.name} not installed"}
            print(f"{entry.name}: skipped ({exc.name} not installed)", flush=True)
            continue
        row: dict[str, Any] = {
            "steps_per_s": control_steps_per_s(entry.name, args.steps),
            "steps_per_s_rendering_84px": control_steps_per_s(
                entry.name, args.render_steps, {"cameras": ["front"], "image_size": 84}
            ),
            "raw_mj_step_per_s": raw_mj_steps_per_s(entry.name, 20 * args.steps),
            "own_mjcf": issubclass(entry.config_cls, MujocoTaskConfig),
        }
        row.update(expert_success(entry.name, args.episodes))
        row = {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}
        results[entry.name] = row
        print(f"{entry.name}: {row}", flush=True)
    print(json.dumps({"benchmark": "env_speed", "episodes": args.episodes, "tasks": results}))


if __name__ == "__main__":
    main()
