"""Critics as an extension point: the `Critic` interface and the ``CRITICS`` registry.

A critic rates how far along a task each stored step is (progress in [0, 1]); the segmenter cuts its curves, the
fleet's floor operator watches them, and a tuned segmenter may come with it. A new critic is one module with a
`Critic` subclass and a training config, plus one registry line::

    CRITICS.register("toy", ToyTrainConfig, "my_package.toy:ToyCritic", "what it is")

after which a loop config's ``critic: {kind: toy, ...}``, ``vla-recover critic train`` and every place that loads a
critic (labelling, the fleet's rater) take it. ``tests/critic/test_kinds.py`` registers a toy one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vla_recover.config import FrozenConfig, validate_config
from vla_recover.critic.base import Critic
from vla_recover.critic.train import CriticTrainConfig
from vla_recover.registry import Registry

__all__ = ["CRITICS", "Critic", "critic_train_config", "fit_critic", "load_critic"]

CRITICS: Registry[FrozenConfig] = Registry("critic")
CRITICS.register(
    "progress",
    CriticTrainConfig,
    "vla_recover.critic.model:ProgressCritic",
    "a network regressing and ranking progress over pairs of steps of the same episode",
)


def critic_train_config(raw: dict[str, Any] | None, source: str = "critic") -> tuple[str, FrozenConfig]:
    """(the critic's registry name, its training config) from a config section: ``kind`` (default ``progress``)
    and that critic's training fields."""
    fields = dict(raw or {})
    kind = fields.pop("kind", "progress")
    if kind not in CRITICS:
        raise ValueError(f"{source}.kind: unknown critic {kind!r}; valid choices: {', '.join(CRITICS.names())}")
    return kind, validate_config(CRITICS.get(kind).config_cls, fields, source=source)


def fit_critic(
    stores: str | Path | list[str | Path],
    out: str | Path,
    raw: dict[str, Any] | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> dict[str, Any]:
    """Train the critic ``raw`` names (see `critic_train_config`) on ``stores``; it is saved in ``out``."""
    kind, config = critic_train_config(raw)
    paths = [Path(s) for s in (stores if isinstance(stores, list) else [stores])]
    critic_cls: type[Critic] = CRITICS.get(kind).load()
    return critic_cls.fit(paths, Path(out), config, on_step)


def load_critic(directory: str | Path, device: Any = "cpu") -> Critic:
    """The critic saved in ``directory``, whatever its kind (a checkpoint saved before kinds is a progress critic),
    on ``device`` (a torch device or its name)."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not a critic checkpoint (no config.json)")
    try:
        name = json.loads(path.read_text()).get("critic", "progress")
    except (json.JSONDecodeError, AttributeError):
        raise ValueError(f"{path}: not a critic checkpoint (not a JSON object)") from None
    critic_cls: type[Critic] = CRITICS.get(name).load()
    return critic_cls.load(directory).to(device)
