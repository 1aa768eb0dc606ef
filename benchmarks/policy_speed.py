"""Policy speed: training samples/s and per-chunk inference latency, ours against LeRobot's DiffusionPolicy.

In one run on the same CPU: our diffusion policy (DDIM, 10 steps), our flow policy (4 Euler steps) and LeRobot
0.4.4's DiffusionPolicy at the same size (state only, same UNet widths, horizon and observation steps), the last in
the separate LeRobot venv (``bash scripts/install_lerobot_venv.sh``). Ours train with the trainer's optimizer. The
policies are measured eager and again after ``compile_backbone`` (the compile runs in the warm-up steps); chunk
latency also as evaluation and the fleet sample, through traced networks (``traced_chunk_latency_ms``).
Last line: one JSON object.

    python benchmarks/policy_speed.py [--train-steps 30] [--batch 256] [--threads 2] [--no-compile]
                                      [--down-dims 64 128 256] [--state-dim 26] [--device cuda] [--bf16]

Needs torch and the policy code only (synthetic batches), so it runs on a GPU machine without the simulation stack;
``--device cuda`` on a machine without CUDA prints ``{"skipped": "no CUDA"}`` and exits 0.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vla_recover.devices import autocast
from vla_recover.policies import Policy, build_policy
from vla_recover.policies.common.optim import make_optimizer

ROOT = Path(__file__).resolve().parents[1]
LEROBOT_PYTHON = ROOT / ".venv-lerobot" / "bin" / "python"
LEROBOT_READY = ROOT / ".venv-lerobot" / "READY"  # written by scripts/install_lerobot_venv.sh once it is done


def synchronize(args: argparse.Namespace) -> None:
    if args.device.type == "cuda":
        torch.cuda.synchronize(args.device)


def measure_latency(policy: Policy, args: argparse.Namespace) -> dict[str, float]:
    """Milliseconds a chunk, from host observations to host actions (predict_chunk moves both ways)."""
    latency = {}
    for size in args.inference_batches:
        obs = {"obs.state": torch.randn(size, args.obs_steps, args.state_dim)}
        policy.predict_chunk(obs, seed=0)
        start = time.perf_counter()
        for i in range(args.inference_repeats):
            policy.predict_chunk(obs, seed=i)
        latency[str(size)] = (time.perf_counter() - start) / args.inference_repeats * 1000
    return latency


def measure_training(policy: Policy, args: argparse.Namespace) -> float:
    """Samples/s over ``train_steps`` steps after ``warmup`` steps (which absorb any compile)."""
    optimizer = make_optimizer(policy, lr=1e-4, weight_decay=1e-6)
    b, device = args.batch, args.device
    batch = {
        "obs.state": torch.randn(b, args.obs_steps, args.state_dim, device=device),
        "action": torch.randn(b, args.horizon, args.action_dim, device=device),
        "action_is_pad": torch.zeros(b, args.horizon, dtype=torch.bool, device=device),
    }
    policy.train()
    for step in range(args.warmup + args.train_steps):
        if step == args.warmup:
            synchronize(args)
            start = time.perf_counter()
        with autocast(device, args.bf16):
            loss = policy.compute_loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    synchronize(args)
    return b * args.train_steps / (time.perf_counter() - start)


def measure_ours(name: str, args: argparse.Namespace, inference_steps: int) -> dict[str, Any]:
    torch.manual_seed(0)
    config = {
        "down_dims": args.down_dims,
        "action_horizon": args.horizon,
        "obs_horizon": args.obs_steps,
        "action_exec": args.action_exec,
        "inference_steps": inference_steps,
    }
    policy = build_policy(name, config, {"obs.state": (args.state_dim,)}, args.action_dim)
    rng = np.random.default_rng(0)
    policy.fit_normalizer(
        {"obs.state": rng.normal(size=(100, args.state_dim)), "action": rng.normal(size=(100, args.action_dim))}
    )
    policy.to(args.device)
    row: dict[str, Any] = {
        "params": sum(p.numel() for p in policy.parameters()),
        "train_samples_per_s": measure_training(policy, args),
        "chunk_latency_ms": measure_latency(policy, args),
    }
    traced = copy.deepcopy(policy).eval()
    traced.trace_networks()  # as evaluation, the fleet and the robot node sample
    row["traced_chunk_latency_ms"] = measure_latency(traced, args)
    if args.compile:  # training and inference compile apart, as they run in different processes
        inference_policy = copy.deepcopy(policy)
        policy.compile_backbone()
        row["compiled_train_samples_per_s"] = measure_training(policy, args)
        inference_policy.compile_backbone()
        row["compiled_chunk_latency_ms"] = measure_latency(inference_policy, args)
    return row


def measure_lerobot(args: argparse.Namespace) -> dict[str, Any] | None:
    if not LEROBOT_READY.exists():
        return None
    payload = {
        "state_dim": args.state_dim, "action_dim": args.action_dim, "horizon": args.horizon,
        "obs_steps": args.obs_steps, "action_exec": args.action_exec, "down_dims": args.down_dims,
        "inference_steps": 10, "batch": args.batch, "warmup": args.warmup, "train_steps": args.train_steps,
        "inference_batches": args.inference_batches, "inference_repeats": args.inference_repeats,
        "threads": args.threads, "device": str(args.device),
    }  # fmt: skip
    script = ROOT / "benchmarks" / "lerobot_policy_side.py"
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    output = subprocess.run(
        [str(LEROBOT_PYTHON), str(script), json.dumps(payload)], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(output.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--train-steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--inference-repeats", type=int, default=30)
    parser.add_argument("--no-compile", dest="compile", action="store_false", help="measure eager only")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--down-dims", type=int, nargs="+", default=[64, 128, 256], help="the U-Net's widths")
    parser.add_argument("--state-dim", type=int, default=26)
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (both sides of the comparison)")
    parser.add_argument("--bf16", action="store_true", help="ours: bfloat16 autocast in training on CUDA")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA on this machine", flush=True)
        print(json.dumps({"benchmark": "policy_speed", "device": args.device, "skipped": "no CUDA"}))
        return
    args.device = torch.device(args.device)
    args.action_dim, args.horizon, args.obs_steps, args.action_exec = 5, 16, 2, 8
    args.inference_batches = [1, 12]
    torch.set_num_threads(args.threads)

    results: dict[str, Any] = {
        "diffusion_ddim10": measure_ours("diffusion", args, 10),
        "flow_euler4": measure_ours("flow", args, 4),
    }
    for name, row in results.items():
        print(f"{name}: {row}", flush=True)
    lerobot = measure_lerobot(args)
    if lerobot is None:
        results["lerobot_diffusion_ddim10"] = {
            "skipped": "no finished .venv-lerobot (bash scripts/install_lerobot_venv.sh)"
        }
    else:
        print(f"lerobot_diffusion_ddim10: {lerobot}", flush=True)
        results["lerobot_diffusion_ddim10"] = lerobot
        ours_diffusion, ours_flow = results["diffusion_ddim10"], results["flow_euler4"]
        compiled = {
            f"compiled_train_throughput_{name}_vs_lerobot": row["compiled_train_samples_per_s"]
            / lerobot["train_samples_per_s"]
            for name, row in (("diffusion", ours_diffusion), ("flow", ours_flow))
            if "compiled_train_samples_per_s" in row
        }
        results["ratios"] = {
            **compiled,
            "train_throughput_diffusion_vs_lerobot": ours_diffusion["train_samples_per_s"]
            / lerobot["train_samples_per_s"],
            "train_throughput_flow_vs_lerobot": ours_flow["train_samples_per_s"] / lerobot["train_samples_per_s"],
            **{
                f"flow_latency_vs_lerobot_batch{b}": ours_flow["chunk_latency_ms"][b] / lerobot["chunk_latency_ms"][b]
                for b in ("1", "12")
            },
            **{
                f"compiled_flow_latency_vs_lerobot_batch{b}": ours_flow["compiled_chunk_latency_ms"][b]
                / lerobot["chunk_latency_ms"][b]
                for b in ("1", "12")
                if "compiled_chunk_latency_ms" in ours_flow
            },
            **{
                f"diffusion_latency_vs_lerobot_batch{b}": ours_diffusion["chunk_latency_ms"][b]
                / lerobot["chunk_latency_ms"][b]
                for b in ("1", "12")
            },
        }
    print(json.dumps({
        "benchmark": "policy_speed", "batch": args.batch, "threads": args.threads, "device": str(args.device),
        "bf16": args.bf16, **results,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
