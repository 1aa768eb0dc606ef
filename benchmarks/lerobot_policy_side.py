"""LeRobot's side of benchmarks/policy_speed.py; runs inside the LeRobot venv (.venv-lerobot).

Prints one JSON object: training samples/s and chunk-inference latency of LeRobot's DiffusionPolicy configured to
the same size as ours (state only, UNet down_dims, horizon, observation steps, DDIM steps).
"""

from __future__ import annotations

import json
import sys
import time

import torch
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy

PROPRIO = 9  # vla_recover's MJCF tasks: tcp xyz, yaw sin/cos, finger opening, tcp velocity


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    args = json.loads(sys.argv[1])
    torch.manual_seed(0)
    torch.set_num_threads(args["threads"])
    device = torch.device(args.get("device", "cpu"))
    state_dim, action_dim, horizon, obs_steps = (
        args["state_dim"],
        args["action_dim"],
        args["horizon"],
        args["obs_steps"],
    )
    config = DiffusionConfig(
        n_obs_steps=obs_steps,
        horizon=horizon,
        n_action_steps=args["action_exec"],
        # LeRobot's diffusion policy needs an image or an environment state: split our state into the robot's
        # proprioception and the objects' poses, the same numbers in two keys.
        input_features={
            "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(PROPRIO,)),
            "observation.environment_state": PolicyFeature(type=FeatureType.ENV, shape=(state_dim - PROPRIO,)),
        },
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(action_dim,))},
        down_dims=tuple(args["down_dims"]),
        noise_scheduler_type="DDIM",
        num_inference_steps=args["inference_steps"],
        device=str(device),
        drop_n_last_frames=horizon - args["action_exec"] - obs_steps + 1,
    )
    policy = DiffusionPolicy(config).to(device)
    params = sum(p.numel() for p in policy.parameters())
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-4)
    b = args["batch"]
    batch = {
        "observation.state": torch.randn(b, obs_steps, PROPRIO, device=device),
        "observation.environment_state": torch.randn(b, obs_steps, state_dim - PROPRIO, device=device),
        "action": torch.randn(b, horizon, action_dim, device=device),
        "action_is_pad": torch.zeros(b, horizon, dtype=torch.bool, device=device),
    }
    policy.train()
    for step in range(args["warmup"] + args["train_steps"]):
        if step == args["warmup"]:
            start = time.perf_counter()
        loss, _ = policy.forward(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    synchronize(device)
    train_samples_per_s = b * args["train_steps"] / (time.perf_counter() - start)
    policy.eval()
    latency = {}
    for size in args["inference_batches"]:
        obs = {
            "observation.state": torch.randn(size, obs_steps, PROPRIO, device=device),
            "observation.environment_state": torch.randn(size, obs_steps, state_dim - PROPRIO, device=device),
        }
        with torch.no_grad():
            policy.diffusion.generate_actions(obs)
            start = time.perf_counter()
            for _ in range(args["inference_repeats"]):
                policy.diffusion.generate_actions(obs).cpu()  # a chunk is used on the host
        latency[str(size)] = (time.perf_counter() - start) / args["inference_repeats"] * 1000
    print(json.dumps({"params": params, "train_samples_per_s": train_samples_per_s, "chunk_latency_ms": latency}))


if __name__ == "__main__":
    main()
