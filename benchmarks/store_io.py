"""Store I/O: our EpisodeStore + WindowSampler against LeRobot 0.4.4's LeRobotDataset, on the same episodes.

    python benchmarks/store_io.py [--episodes 40] [--lowdim-repeat 10] [--batch-episodes 8] [--read-seconds 10]

Data: scripted-expert PickPlaceBin episodes with real rendered 84x84 front and wrist images
(``expert_episodes(..., task_config={"cameras": ["front", "wrist"], "image_size": 84})``), cached in
runs/bench_cache/. Low-dim figures use state + action of the same episodes, repeated ``--lowdim-repeat`` times.

- write: steps/s from opening an empty store to closing it. Ours: ``append_episodes`` with ``--batch-episodes``
  episodes per call (the recorder commits finished episodes in such batches); our store also writes the
  provenance columns. LeRobot: ``create``, ``add_frame`` per step, ``save_episode`` per episode, ``finalize``,
  images as embedded PNG ``image`` features (its video features cannot be read back by LeRobot 0.4.4 here: no
  torchcodec, and torchvision dropped VideoReader), with the faster of 0 and 8 image-writer threads.
- read: random training windows/s, 256 per batch, each 2 observations (state, and both cameras in the image case)
  + 16 actions. Ours: ``WindowSampler.sample`` (default: reads the needed keys into memory once when they fit
  ``cache_bytes``; also reported uncached, reading zarr per batch). LeRobot: ``delta_timestamps`` windows through a
  torch DataLoader (shuffle, num_workers=0).

LeRobot runs in .venv-lerobot (scripts/install_lerobot_venv.sh) through benchmarks/lerobot_side.py; without it only
our figures are given. Prints progress lines, then one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("MUJOCO_GL", "osmesa")

from vla_recover.data import EpisodeData, EpisodeStore, WindowSampler, WindowSpec

ROOT = Path(__file__).resolve().parents[1]
LEROBOT_PYTHON = ROOT / ".venv-lerobot" / "bin" / "python"
LEROBOT_READY = ROOT / ".venv-lerobot" / "READY"  # written by scripts/install_lerobot_venv.sh once it is done
CAMERAS = ("front", "wrist")
_STORE_KEY = {k: k for k in ("action", "phase", "progress", "sim_time")}  # the rest are observations: obs.<key>


def log(message: str) -> None:
    print(message, flush=True)


def rendered_episodes(count: int, cache_dir: Path) -> Path:
    """PickPlaceBin expert episodes with two 84x84 cameras, as one npz (rendering is slow: cached)."""
    path = cache_dir / f"pickplace_{count}_front_wrist_84.npz"
    if path.exists():
        return path
    from vla_recover.rollout import expert_episodes

    cache_dir.mkdir(parents=True, exist_ok=True)
    parts: dict[str, list[np.ndarray]] = {}
    lengths, instructions, outcomes = [], [], []
    start = time.perf_counter()
    task_config = {"cameras": list(CAMERAS), "image_size": 84}
    for i, record in enumerate(expert_episodes("PickPlaceBin", list(range(count)), task_config=task_config)):
        episode = record.to_episode_data()
        for key, value in episode.steps.items():
            parts.setdefault(key.removeprefix("obs."), []).append(value)
        lengths.append(episode.length)
        instructions.append(episode.instruction)
        outcomes.append(episode.outcome)
        log(f"rendered episode {i + 1}/{count} ({sum(lengths)} steps, {time.perf_counter() - start:.0f} s)")
    arrays = {key: np.concatenate(values) for key, values in parts.items()}
    np.savez(
        path, lengths=np.array(lengths), instructions=np.array(instructions), outcomes=np.array(outcomes), **arrays
    )
    return path


def episodes_from(data: Any, images: bool, repeat: int = 1) -> list[EpisodeData]:
    keys = ["state", "action", "phase", "progress", "sim_time"] + ([f"images.{c}" for c in CAMERAS] if images else [])
    bounds = np.concatenate([[0], np.cumsum(data["lengths"])])
    arrays = {key: data[key] for key in keys}
    out = []
    for _ in range(repeat):
        for e in range(len(data["lengths"])):
            lo, hi = bounds[e], bounds[e + 1]
            steps = {_STORE_KEY.get(k, f"obs.{k}"): v[lo:hi] for k, v in arrays.items()}
            out.append(
                EpisodeData(task="PickPlaceBin", steps=steps, robot="sim0", instruction=str(data["instructions"][e]),
                            outcome=str(data["outcomes"][e]), actor="scripted")
            )  # fmt: skip
    return out


def ours_write(episodes: list[EpisodeData], path: Path, batch: int) -> dict[str, float]:
    shutil.rmtree(path, ignore_errors=True)
    steps = sum(e.length for e in episodes)
    start = time.perf_counter()
    with EpisodeStore(path, mode="a") as store:
        for i in range(0, len(episodes), batch):
            store.append_episodes(episodes[i : i + batch])
    seconds = time.perf_counter() - start
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return {"steps": steps, "seconds": seconds, "steps_per_s": steps / seconds, "bytes": size}


def ours_read(path: Path, images: bool, batch: int, seconds: float, cached: bool) -> dict[str, float]:
    obs_keys = ("obs.state",) + (tuple(f"obs.images.{c}" for c in CAMERAS) if images else ())
    spec = WindowSpec(obs_keys=obs_keys, obs_horizon=2, action_horizon=16)
    with EpisodeStore(path, mode="r") as store:
        start = time.perf_counter()
        sampler = WindowSampler(store, spec, cache_bytes=(4 << 30) if cached else 0, seed=0)
        load = time.perf_counter() - start
        sampler.sample(batch)  # warm-up
        windows, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            windows += len(sampler.sample(batch)["action"])
        elapsed = time.perf_counter() - start
    return {"load_seconds": load, "windows": windows, "seconds": elapsed, "windows_per_s": windows / elapsed}


def lerobot_side(data: Path, root: Path, mode: str, args: argparse.Namespace) -> dict[str, Any] | None:
    if not LEROBOT_READY.exists():
        log("no finished .venv-lerobot: LeRobot figures skipped (bash scripts/install_lerobot_venv.sh)")
        return None
    script = ROOT / "benchmarks" / "lerobot_side.py"
    options = [
        "--data",
        data,
        "--root",
        root,
        "--mode",
        mode,
        "--batch",
        args.batch,
        "--read-seconds",
        args.read_seconds,
    ]
    command = [str(LEROBOT_PYTHON), str(script), *map(str, options)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(root / "hf_home"), "TQDM_DISABLE": "1"}
    process = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    for line in process.stdout.strip().splitlines()[:-1]:
        log(f"  {line}")
    if process.returncode != 0:
        log(f"LeRobot side failed ({mode}):\n{process.stderr[-3000:]}")
        return None
    result: dict[str, Any] = json.loads(process.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description="store write/read throughput, ours vs LeRobot")
    parser.add_argument("--episodes", type=int, default=40, help="rendered expert episodes (two 84x84 cameras)")
    parser.add_argument("--lowdim-repeat", type=int, default=10, help="low-dim runs use the episodes this many times")
    parser.add_argument("--batch-episodes", type=int, default=8, help="episodes per append_episodes call")
    parser.add_argument("--batch", type=int, default=256, help="windows per training batch")
    parser.add_argument("--read-seconds", type=float, default=10.0)
    parser.add_argument("--cache-dir", type=Path, default=ROOT / "runs" / "bench_cache")
    parser.add_argument("--no-lerobot", action="store_true", help="measure only our store")
    args = parser.parse_args()

    data_path = rendered_episodes(args.episodes, args.cache_dir)
    data = np.load(data_path)
    work = Path(tempfile.mkdtemp(prefix="store_io_"))
    try:
        lowdim_path = work / "lowdim.npz"
        repeat = args.lowdim_repeat
        np.savez(
            lowdim_path,
            state=np.tile(data["state"], (repeat, 1)),
            action=np.tile(data["action"], (repeat, 1)),
            lengths=np.tile(data["lengths"], repeat),
            instructions=np.tile(data["instructions"], repeat),
        )
        result: dict[str, Any] = {
            "data": {
                "source": "PickPlaceBin scripted expert, rendered 84x84 front+wrist (MuJoCo offscreen)",
                "episodes_images": len(data["lengths"]),
                "steps_images": int(data["lengths"].sum()),
                "episodes_lowdim": int(len(data["lengths"]) * repeat),
                "steps_lowdim": int(data["lengths"].sum() * repeat),
                "state_dim": int(data["state"].shape[1]),
                "action_dim": int(data["action"].shape[1]),
            },
            "settings": {"append_batch_episodes": args.batch_episodes, "window": "2 obs + 16 actions",
                         "batch_windows": args.batch, "read_seconds": args.read_seconds},
        }  # fmt: skip
        ours: dict[str, Any] = {}
        theirs: dict[str, Any] = {}
        for mode in ("lowdim", "images"):
            images = mode == "images"
            episodes = episodes_from(data, images, 1 if images else repeat)
            store = work / f"ours_{mode}"
            ours[f"write_{mode}"] = ours_write(episodes, store, args.batch_episodes)
            log(f"ours write {mode}: {ours[f'write_{mode}']}")
            for cached in (True, False):
                name = f"read_{mode}" + ("" if cached else "_uncached")
                ours[name] = ours_read(store, images, args.batch, args.read_seconds, cached)
                log(f"ours {name}: {ours[name]}")
            if not args.no_lerobot:
                side = lerobot_side(data_path if images else lowdim_path, work / f"lerobot_{mode}", mode, args)
                if side is not None:
                    theirs[f"write_{mode}"] = side["write"]
                    theirs[f"write_{mode}_by_threads"] = side["write_all"]
                    theirs[f"read_{mode}"] = side["read"]
        result["ours"] = ours
        result["lerobot"] = theirs
        summary: dict[str, float] = {}
        for mode in ("lowdim", "images"):
            summary[f"ours_write_{mode}_steps_s"] = ours[f"write_{mode}"]["steps_per_s"]
            summary[f"ours_read_{mode}_windows_s"] = ours[f"read_{mode}"]["windows_per_s"]
            summary[f"ours_read_{mode}_uncached_windows_s"] = ours[f"read_{mode}_uncached"]["windows_per_s"]
            if f"write_{mode}" in theirs:
                summary[f"lerobot_write_{mode}_steps_s"] = theirs[f"write_{mode}"]["steps_per_s"]
                summary[f"lerobot_read_{mode}_windows_s"] = theirs[f"read_{mode}"]["windows_per_s"]
                for kind, unit in (("write", "steps_s"), ("read", "windows_s")):
                    summary[f"ratio_{kind}_{mode}"] = (
                        summary[f"ours_{kind}_{mode}_{unit}"] / summary[f"lerobot_{kind}_{mode}_{unit}"]
                    )
                summary[f"ratio_read_{mode}_uncached"] = (
                    summary[f"ours_read_{mode}_uncached_windows_s"] / summary[f"lerobot_read_{mode}_windows_s"]
                )
        result["summary"] = {k: round(v, 2) for k, v in summary.items()}
        print(json.dumps(result))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
