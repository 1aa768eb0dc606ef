"""Deterministic synthetic episodes: episode i can be regenerated anywhere to compare bit for bit."""

from __future__ import annotations

import sys

import numpy as np

from vla_recover.data import EpisodeData, EpisodeStore

ACTORS = ("scripted", "policy", "human")


def synthetic_episode(i: int, images: bool = False) -> EpisodeData:
    rng = np.random.default_rng(1000 + i)
    length = int(rng.integers(5, 60))
    steps = {
        "obs.state": rng.normal(size=(length, 7)).astype(np.float32),
        "action": rng.uniform(-1, 1, size=(length, 4)).astype(np.float32),
        "progress": np.linspace(0, 1, length, dtype=np.float32),
    }
    if images:
        steps["obs.images.front"] = rng.integers(0, 255, size=(length, 16, 16, 3), dtype=np.uint8)
    return EpisodeData(
        task="Synthetic",
        steps=steps,
        robot=f"robot{i % 3}",
        instruction=f"do thing {i % 4}",
        outcome=("success", "failure")[i % 2],
        actor=ACTORS[i % 3],
        info={"i": i},
    )


def main() -> None:
    """Append synthetic episodes in small batches forever (until killed): python -m tests.data.synthetic PATH."""
    path = sys.argv[1]
    images = len(sys.argv) > 2 and sys.argv[2] == "images"
    with EpisodeStore(path, mode="a") as store:
        i = len(store)
        while True:
            batch = [synthetic_episode(i + k, images) for k in range(1 + i % 3)]
            store.append_episodes(batch)
            i += len(batch)
            print(i, flush=True)


if __name__ == "__main__":
    main()
