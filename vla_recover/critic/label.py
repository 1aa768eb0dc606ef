"""``vla-recover label``: cut every stored episode with a trained critic and write the segments into the store.

Segments go in with source ``critic`` (an episode's earlier critic segments are replaced), and each labelled
episode gets a ``labels_written`` event naming the critic, so a label can always be traced to what made it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from vla_recover.critic.base import Critic
from vla_recover.critic.data import CriticEpisode, load_episodes
from vla_recover.critic.segmenter import SegmenterConfig, segment_timeline
from vla_recover.data import EpisodeStore

__all__ = ["critic_segments", "label_store"]


def critic_segments(
    critic: Critic, episode: CriticEpisode, config: SegmenterConfig | None = None
) -> tuple[np.ndarray, list[tuple[int, int, str]]]:
    """(the critic's progress along the episode's timeline, its segments in episode rows)."""
    curve = critic.predict(episode.inputs, episode.instruction, where=f"episode {episode.id}")
    return curve, segment_timeline(episode, curve, config, critic.tuned)


def label_store(
    store_path: str | Path,
    critic_dir: str | Path,
    config: SegmenterConfig | None = None,
    task: str | None = None,
    on_episode: Callable[[int, int], None] | None = None,
    curves: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
) -> dict[str, Any]:
    """Label every episode (of ``task``); returns episodes labelled and steps per kind. ``curves``, when given,
    receives each episode's (episode rows of its timeline, the critic's progress on them) by episode id."""
    from vla_recover.critic.kinds import load_critic

    critic = load_critic(critic_dir)
    config = config or SegmenterConfig()
    rule = config.rule_for(critic.tuned)  # a missing tuned segmenter is an error before anything is written
    steps_by_kind: Counter[str] = Counter()
    with EpisodeStore(store_path, mode="a") as store:
        episodes = load_episodes(store, critic.input_keys, task)
        for done, episode in enumerate(episodes, start=1):
            curve, segments = critic_segments(critic, episode, config)
            if curves is not None:
                curves[episode.id] = (episode.rows, curve)
            scored = [
                (start, stop, kind, float(np.mean(curve[(episode.rows >= start) & (episode.rows < stop)])))
                for start, stop, kind in segments
            ]
            written = {"critic": str(critic_dir), "segmenter": rule, "segments": len(segments)}
            store.write_segments(
                episode.id, "critic", scored, actor="critic", event="labels_written", payload=written, replace=True
            )
            for start, stop, kind in segments:
                steps_by_kind[kind] += stop - start
            if on_episode is not None:
                on_episode(done, len(episodes))
    return {"episodes": len(episodes), "segmenter": rule, "steps_by_kind": dict(steps_by_kind)}
