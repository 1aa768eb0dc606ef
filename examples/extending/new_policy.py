"""A new policy: a deterministic MLP that regresses the whole action chunk from the observation window.

It shows what a policy needs: a config class (the shared `PolicyConfig` fields plus its own, each described), a
`Policy` subclass with the two abstract methods (``compute_loss``: a weighted loss over the batch in which padded
actions do not count; ``sample_actions``: chunks in normalised space) and one entry in ``POLICIES``. From then on
the trainer, checkpoints, evaluation and the loop take it by name (``policy: mlp`` in a train config).

``main()`` records a few LiftCube demonstrations by the scripted expert into a temporary store, trains the MLP on
them with the project's trainer (what ``vla-recover train`` runs), reloads the saved checkpoint and evaluates it in
closed loop on two held-out seeds. It takes seconds on one CPU core. Run it from the repository root:

    python examples/extending/new_policy.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch
from pydantic import Field
from torch import nn
from torch.nn import functional as F

from vla_recover.data import EpisodeStore
from vla_recover.evaluate import evaluate_policy
from vla_recover.policies import POLICIES, GuidanceHook, Policy, PolicyConfig
from vla_recover.policies.common.base import NoiseSource
from vla_recover.policies.common.checkpoint import load_policy
from vla_recover.rollout import expert_episodes
from vla_recover.train.trainer import TrainConfig, Trainer


class MLPConfig(PolicyConfig):
    """The shared fields (horizons, inputs) and the network's size. The shared backbone fields go unused, though
    their check still asks for an action_horizon that suits the default unet (a multiple of 4)."""

    hidden_dim: int = Field(256, ge=8, le=4096, description="width of each hidden layer")
    layers: int = Field(2, ge=1, le=8, description="hidden layers")


class MLPPolicy(Policy):
    """Chunk regression: one forward pass per chunk, no sampling noise."""

    name = "mlp"
    backbone_attr = "net"  # what compile_backbone compiles
    config: MLPConfig

    def __init__(self, config: MLPConfig, shapes: dict[str, tuple[int, ...]], action_dim: int) -> None:
        super().__init__(config, shapes, action_dim)  # the normaliser, image encoders and self.cond_dim
        blocks: list[nn.Module] = []
        width = self.cond_dim
        for _ in range(config.layers):
            blocks += [nn.Linear(width, config.hidden_dim), nn.GELU()]
            width = config.hidden_dim
        self.net = nn.Sequential(*blocks, nn.Linear(width, config.action_horizon * action_dim))

    def _chunk(self, cond: torch.Tensor) -> torch.Tensor:
        return self.net(cond).view(-1, self.config.action_horizon, self.action_dim)

    def compute_loss(self, batch: dict[str, torch.Tensor], weights: torch.Tensor | None = None) -> torch.Tensor:
        target = self.normalizer.normalize("action", batch["action"].float())
        error = F.mse_loss(self._chunk(self.encode_obs(batch)), target, reduction="none")  # (B, H, A)
        # the base class masks padded actions (action_is_pad) and applies the weighter's per-sample weights
        return self._weighted(error, batch, weights)

    def sample_actions(self, cond: torch.Tensor, generator: NoiseSource, hook: GuidanceHook | None) -> torch.Tensor:
        # No noise to draw: the chunk is the same whatever the seed. A guidance hook sees it as both the noisy and
        # the clean estimate, and its term is added once.
        chunk = self._chunk(cond)
        if hook is not None:
            term = hook(0, chunk, chunk)
            if term is not None:
                chunk = chunk + term
        return chunk


# The target is a "module:Class" string, imported when first used; __name__ keeps it right whether this file runs
# as a script (__main__) or is imported.
POLICIES.register("mlp", MLPConfig, f"{__name__}:MLPPolicy", "deterministic MLP regressing the action chunk")


def main(episodes: int = 8, steps: int = 400, eval_seeds: tuple[int, ...] = (100_000, 100_001)) -> dict[str, Any]:
    """Demonstrations → training → checkpoint → closed-loop evaluation; returns the loss curve, the reloaded policy
    and the evaluation's result."""
    with tempfile.TemporaryDirectory() as tmp:
        store_path = Path(tmp) / "demos"
        with EpisodeStore(store_path, mode="a") as store:
            for record in expert_episodes("LiftCube", list(range(episodes))):
                store.append_episode(record.to_episode_data())

        config = TrainConfig(
            policy="mlp",
            policy_config={"obs_horizon": 2, "action_horizon": 8, "action_exec": 4, "hidden_dim": 128},
            data=store_path,
            out=Path(tmp) / "train",
            steps=steps,
            batch_size=64,
            lr=1e-3,
            warmup_steps=20,
            log_every=50,
            save_every=steps,
        )
        trainer = Trainer(config)
        trainer.run()
        losses = [record["loss"] for record in trainer.history]

        # the checkpoint names its policy "mlp": loading rebuilds it through POLICIES
        policy, embedder, _ = load_policy(config.out / "policy")
        result = evaluate_policy(policy, embedder, "LiftCube", list(eval_seeds))

    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} over {steps} steps")
    print(f"LiftCube success {result['successes']}/{result['episodes']}, mean episode length {result['mean_length']}")
    return {"losses": losses, "policy": policy, "evaluation": result}


if __name__ == "__main__":
    main()
