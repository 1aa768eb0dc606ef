"""A new critic: progress as a ridge regression of the state on how far through its episode each step is.

It shows what a critic needs: a training config (its fields, each described), a `Critic` subclass (``input_keys``,
``predict``: progress in [0, 1] per step, ``fit``: train on stores and save, ``load``) and one entry in
``CRITICS``. From then on a loop config's ``critic: {kind: ridge, ...}``, ``vla-recover critic train`` with
``kind: ridge`` in its config, labelling (``vla-recover label``) and the fleet's critic rater take it.

``main()`` writes a small store of episodes that walk towards a goal (some turn back), fits the critic on it, labels
the store with it and prints the steps per segment kind. It takes a second. Run it from the repository root:

    python examples/extending/new_critic.py
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from vla_recover.config import FrozenConfig
from vla_recover.critic.base import Critic
from vla_recover.critic.kinds import CRITICS, fit_critic
from vla_recover.critic.label import label_store
from vla_recover.data import EpisodeData, EpisodeStore


class RidgeCriticConfig(FrozenConfig):
    state_key: str = Field("obs.state", description="the stored key it reads")
    ridge: float = Field(1e-3, gt=0.0, description="ridge penalty of the least-squares fit")


class RidgeCritic(Critic):
    """Progress as a linear function of the state, fit to each step's share of its episode."""

    NAME = "ridge"

    def __init__(self, weights: np.ndarray, state_key: str) -> None:
        self.weights, self.state_key = weights, state_key

    @property
    def input_keys(self) -> tuple[str, ...]:
        return (self.state_key,)

    def predict(self, steps: dict[str, np.ndarray], instruction: str | list[str], where: str = "episode") -> np.ndarray:
        states = np.asarray(steps[self.state_key], dtype=np.float64)
        if states.ndim != 2 or states.shape[1] + 1 != self.weights.size:
            raise ValueError(f"{where}: {self.state_key} has shape {states.shape[1:]}, the critic reads "
                             f"({self.weights.size - 1},)")  # fmt: skip
        return np.clip(np.hstack([states, np.ones((len(states), 1))]) @ self.weights, 0.0, 1.0).astype(np.float32)

    @classmethod
    def fit(
        cls, stores: list[Path], out: Path, config: Any, on_step: Callable[[int, float], None] | None = None
    ) -> dict[str, Any]:
        states, shares = [], []
        for path in stores:
            with EpisodeStore(path) as store:
                for row, data in store.iter_episodes():
                    states.append(data[config.state_key])
                    shares.append(np.linspace(0.0, 1.0, row.length))
        x = np.hstack([np.concatenate(states), np.ones((sum(map(len, states)), 1))])
        y = np.concatenate(shares)
        weights = np.linalg.solve(x.T @ x + config.ridge * np.eye(x.shape[1]), x.T @ y)
        mse = float(np.mean((x @ weights - y) ** 2))
        out.mkdir(parents=True, exist_ok=True)
        np.save(out / "weights.npy", weights)
        (out / "config.json").write_text(json.dumps({"critic": cls.NAME, "state_key": config.state_key}))
        if on_step is not None:
            on_step(1, mse)
        return {"episodes": len(states), "mse": round(mse, 5)}

    @classmethod
    def load(cls, directory: str | Path) -> RidgeCritic:
        saved = json.loads((Path(directory) / "config.json").read_text())
        return cls(np.load(Path(directory) / "weights.npy"), saved["state_key"])


CRITICS.register("ridge", RidgeCriticConfig, f"{__name__}:RidgeCritic", "a ridge regression of the state on time")


def walking_store(path: Path, episodes: int = 6) -> Path:
    """Episodes whose state walks towards a goal; every other one turns back two thirds of the way and fails."""
    with EpisodeStore(path, mode="a") as store:
        for i in range(episodes):
            up = np.linspace(0.0, 1.0, 30)
            walk = up if i % 2 == 0 else np.concatenate([up[:20], up[20:0:-1][:10]])
            steps = {
                "obs.state": np.stack([walk, 1.0 - walk], axis=1).astype(np.float32),
                "action": np.zeros((30, 2), np.float32),
                "progress": walk.astype(np.float32),
            }
            outcome = "success" if i % 2 == 0 else "failure"
            store.append_episode(EpisodeData("Walk", steps, outcome=outcome, actor="policy", info={"seed": i}))
    return path


def main() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        store = walking_store(Path(tmp) / "store")
        metrics = fit_critic(store, Path(tmp) / "critic", {"kind": "ridge", "ridge": 0.01})
        labels = label_store(store, Path(tmp) / "critic")
    print(json.dumps({"fit": metrics, "labels": labels}))
    return {"fit": metrics, "labels": labels}


if __name__ == "__main__":
    main()
