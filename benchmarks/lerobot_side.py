"""LeRobot's half of benchmarks/store_io.py; runs inside .venv-lerobot (LeRobot 0.4.4), never imports vla_recover.

    .venv-lerobot/bin/python benchmarks/lerobot_side.py --data EPISODES.npz --root DIR --mode lowdim|images

Writes the episodes of EPISODES.npz with ``LeRobotDataset.create`` / ``add_frame`` / ``save_episode`` /
``finalize`` (images as ``image`` features, embedded PNG: video is not readable by LeRobot 0.4.4 here), then reads
random training windows (2 observations, 16 actions) through ``delta_timestamps`` and a torch DataLoader.
Prints progress lines, then one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def features(data: Any, images: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "observation.state": {"dtype": "float32", "shape": (data["state"].shape[1],), "names": None},
        "action": {"dtype": "float32", "shape": (data["action"].shape[1],), "names": None},
    }
    if images:
        for cam in ("front", "wrist"):
            shape = tuple(int(n) for n in data[f"images.{cam}"].shape[1:])
            out[f"observation.images.{cam}"] = {
                "dtype": "image",
                "shape": shape,
                "names": ["height", "width", "channels"],
            }
    return out


def write(data: Any, root: Path, images: bool, fps: int, threads: int) -> dict[str, float]:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    shutil.rmtree(root, ignore_errors=True)
    lengths, instructions = data["lengths"], data["instructions"]
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    keys = {"observation.state": "state", "action": "action"}
    if images:
        keys.update({f"observation.images.{cam}": f"images.{cam}" for cam in ("front", "wrist")})
    arrays = {name: data[source] for name, source in keys.items()}  # loaded before the clock starts
    start = time.perf_counter()
    dataset = LeRobotDataset.create(
        repo_id="bench/store_io", fps=fps, root=root, features=features(data, images), use_videos=False,
        image_writer_threads=threads,
    )  # fmt: skip
    for e in range(len(lengths)):
        for t in range(bounds[e], bounds[e + 1]):
            frame = {name: values[t] for name, values in arrays.items()}
            frame["task"] = str(instructions[e])
            dataset.add_frame(frame)
        dataset.save_episode()
    dataset.finalize()
    seconds = time.perf_counter() - start
    steps = int(bounds[-1])
    size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    return {"steps": steps, "seconds": seconds, "steps_per_s": steps / seconds, "bytes": size}


def read(root: Path, images: bool, fps: int, batch: int, seconds: float, workers: int) -> dict[str, float]:
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    window = {"observation.state": [-1 / fps, 0.0], "action": [k / fps for k in range(16)]}
    if images:
        window.update({f"observation.images.{cam}": [-1 / fps, 0.0] for cam in ("front", "wrist")})
    start = time.perf_counter()
    dataset = LeRobotDataset("bench/store_io", root=root, delta_timestamps=window)
    load = time.perf_counter() - start
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers)
    iterator = iter(loader)
    next(iterator)  # warm-up: first batch builds the workers and the arrow tables' caches
    windows, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        try:
            item = next(iterator)
        except StopIteration:
            iterator = iter(loader)
            continue
        windows += len(item["action"])
    elapsed = time.perf_counter() - start
    return {"load_seconds": load, "windows": windows, "seconds": elapsed, "windows_per_s": windows / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--mode", choices=("lowdim", "images"), required=True)
    parser.add_argument("--fps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--read-seconds", type=float, default=10.0)
    parser.add_argument("--image-writer-threads", type=int, nargs="+", default=[0, 8])
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args()
    images = args.mode == "images"
    data = np.load(args.data, allow_pickle=False)
    out: dict[str, Any] = {"mode": args.mode}
    threads_tried = args.image_writer_threads if images else [0]
    writes = {}
    for threads in threads_tried:
        root = args.root / f"{args.mode}_t{threads}"
        writes[threads] = write(data, root, images, args.fps, threads)
        print(f"lerobot write {args.mode} (image_writer_threads={threads}): {writes[threads]}", flush=True)
    best = max(writes, key=lambda t: writes[t]["steps_per_s"])
    out["write"] = {**writes[best], "image_writer_threads": best}
    out["write_all"] = {str(t): w["steps_per_s"] for t, w in writes.items()}
    out["read"] = read(
        args.root / f"{args.mode}_t{best}", images, args.fps, args.batch, args.read_seconds, args.workers
    )
    print(f"lerobot read {args.mode}: {out['read']}", flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
