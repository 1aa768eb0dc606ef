"""Cut an episode's progress curve into ``progress``, ``idle``, ``failure_inducing`` and ``recovery`` segments.

The rules, applied to every step outside ``rewind`` segments (a rewind's rows replay visited states backwards and
say nothing about the policy):

1. Smooth the progress curve with a centred moving average of ``smooth_steps`` (edges repeat the end values).
2. Call each step rising, falling or flat, by one of two rules (``rule``; ``auto``, the default, is the critic's
   tuned segmenter when it has one, `vla_recover.critic.tuned`, which names every step's kind itself, else ``slope``):

   - ``slope`` (what ``auto`` falls back to): the slope at step t is the smoothed rise over the ``slope_steps``
     steps around it, per step; at least ``rise_per_step`` is rising, at most ``-fall_per_step`` falling, else flat.
   - ``dead_band``: the curve has moved once it is ``move`` away from where it last moved. The
     move's steps, from its turn (the lowest point before a rise, the highest before a fall), are rising or
     falling if it came at ``rise_per_step`` (``fall_per_step``) per step or faster, else flat (a slow drift);
     steps that never move are flat. Noise inside the band never makes a segment, however long it lasts. The
     ground truth the critic is scored against uses this rule on the simulator's progress
     (`vla_recover.critic.metrics`).

3. Rising steps are ``recovery`` while the smoothed curve is still below the best it reached earlier minus
   ``regain_margin`` (regaining lost ground), and ``progress`` otherwise; falling steps are ``failure_inducing``;
   flat steps are ``idle``.
4. Runs shorter than ``min_steps`` take the kind of the run before them (the first run: of the run after it), so
   one noisy step never makes a segment.

The output covers every non-rewind step with ``(start, stop, kind)`` runs, ``stop`` exclusive.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field

from vla_recover.config import FrozenConfig
from vla_recover.critic.data import CriticEpisode, human_steps, timeline_rows
from vla_recover.curves import best_before, smoothed

if TYPE_CHECKING:
    from vla_recover.critic.tuned import TunedSegmenter

__all__ = [
    "CRITIC_KINDS",
    "SegmenterConfig",
    "cut_episode",
    "dead_band_kinds",
    "segment_episode",
    "segment_timeline",
]

CRITIC_KINDS: tuple[str, ...] = ("progress", "idle", "failure_inducing", "recovery")


class SegmenterConfig(FrozenConfig):
    rule: Literal["auto", "tuned", "slope", "dead_band"] = Field(
        default="auto", description="how a step is rising or falling; auto: the critic's tuned segmenter, else slope"
    )
    smooth_steps: int = Field(default=5, ge=1, le=1001, description="moving-average window (steps, odd or even)")
    move: float = Field(default=0.04, gt=0.0, le=1.0, description="dead_band: the curve has moved this far")
    slope_steps: int = Field(default=10, ge=1, le=1000, description="slope: the rise over this many steps")
    rise_per_step: float = Field(default=0.002, gt=0.0, description="slope at or above this: rising")
    fall_per_step: float = Field(default=0.002, gt=0.0, description="slope at or below minus this: falling")
    regain_margin: float = Field(default=0.02, ge=0.0, description="rising this far below the earlier best: recovery")
    min_steps: int = Field(default=5, ge=1, description="shorter runs merge into their neighbour (the rules only)")

    def rule_for(self, tuned: TunedSegmenter | None) -> str:
        """The rule that cuts a critic's curves: ``auto`` resolved by whether the critic has a tuned segmenter."""
        if self.rule == "tuned" and tuned is None:
            raise ValueError(
                "segmenter rule 'tuned': this critic has no tuned segmenter; make one with vla-recover critic tune"
            )
        if self.rule == "auto":
            return "tuned" if tuned is not None else "slope"
        return self.rule


def segment_episode(
    progress: np.ndarray,
    config: SegmenterConfig | None = None,
    supervision: Sequence[tuple[int, int, str]] = (),
    tuned: TunedSegmenter | None = None,
    state: np.ndarray | None = None,
) -> list[tuple[int, int, str]]:
    """The critic segments of one episode from its per-step progress (see the module docstring for the rules);
    ``tuned``: the critic's tuned segmenter, if it has one; ``state``: the critic's state input at each step outside
    rewinds, which a segmenter tuned on the state's motion reads."""
    config = config or SegmenterConfig()
    if config.rule_for(tuned) == "tuned":
        assert tuned is not None
        human = human_steps(np.asarray(progress).size, supervision)
        return cut_episode(progress, lambda curve: tuned.step_kinds(curve, human, state), 1, supervision)
    return cut_episode(progress, lambda curve: _step_kinds(curve, config), config.min_steps, supervision)


def segment_timeline(
    episode: CriticEpisode,
    curve: np.ndarray,
    config: SegmenterConfig | None = None,
    tuned: TunedSegmenter | None = None,
) -> list[tuple[int, int, str]]:
    """`segment_episode` for a curve over the episode's timeline (one value per row outside rewinds), as a critic
    predicts it."""
    state = episode.inputs.get(tuned.motion.key) if tuned is not None and tuned.motion is not None else None
    return segment_episode(episode.on_rows(curve), config, episode.supervision, tuned, state)


def dead_band_kinds(
    curve: np.ndarray,
    move: float,
    rise_per_step: float,
    fall_per_step: float,
    regain_margin: float,
    turn_tolerance: float = 0.0,
) -> list[str]:
    """The kind of each step of ``curve`` by the dead-band rule (module docstring, rule 2). A move begins at its
    turn: the last step within ``turn_tolerance`` of the lowest point before a rise (the highest before a fall), so
    a noisy plateau's highest wobble does not pull the start of a fall back to it."""
    kinds = ["idle"] * curve.size
    best = best_before(curve)
    anchor, last_kind = 0, "idle"
    for t in range(1, curve.size):
        if abs(curve[t] - curve[anchor]) < move:
            continue
        # the steps between the previous move and this one's turn stay idle; a move that goes on the way the
        # last one went turns where that one ended
        window = curve[anchor:t]
        rising = curve[t] > curve[anchor]
        if last_kind == ("rising" if rising else "falling"):
            turn = anchor
        else:
            near = window <= window.min() + turn_tolerance if rising else window >= window.max() - turn_tolerance
            turn = anchor + int(np.flatnonzero(near)[-1])
        change = curve[t] - curve[turn]
        last_kind = "idle"
        if change >= rise_per_step * (t - turn):
            last_kind = "rising"
            for step in range(turn + 1, t + 1):
                kinds[step] = "recovery" if curve[step] < best[step] - regain_margin else "progress"
        elif -change >= fall_per_step * (t - turn):
            last_kind = "falling"
            kinds[turn + 1 : t + 1] = ["failure_inducing"] * (t - turn)
        anchor = t
    if curve.size > 1:
        kinds[0] = kinds[1]  # the first step has no move of its own
    return kinds


def cut_episode(
    progress: np.ndarray,
    step_kinds: Callable[[np.ndarray], list[str]],
    min_steps: int,
    supervision: Sequence[tuple[int, int, str]] = (),
) -> list[tuple[int, int, str]]:
    """Segments from a per-step rule: ``step_kinds`` names the kind of every step of the curve outside rewinds;
    runs shorter than ``min_steps`` merge into a neighbour (rule 5), and the runs map back to episode rows."""
    progress = np.asarray(progress, dtype=np.float64)
    if progress.ndim != 1 or progress.size == 0:
        raise ValueError(f"progress: expected a non-empty 1-D curve, got shape {progress.shape}")
    bad = np.flatnonzero(~np.isfinite(progress))
    if bad.size:
        raise ValueError(f"progress: NaN or Inf at step {int(bad[0])} (of {progress.size})")
    keep = timeline_rows(progress.size, supervision)
    if keep.size == 0:
        return []
    kinds = step_kinds(progress[keep])
    runs = _merge_short(_runs(kinds), min_steps)
    # back to episode rows: a run of kept steps may straddle a rewind, which splits it
    segments: list[tuple[int, int, str]] = []
    for start, stop, kind in runs:
        rows = keep[start:stop]
        breaks = np.flatnonzero(np.diff(rows) > 1)
        for piece in np.split(rows, breaks + 1):
            segments.append((int(piece[0]), int(piece[-1]) + 1, kind))
    return segments


def _step_kinds(progress: np.ndarray, config: SegmenterConfig) -> list[str]:
    curve = smoothed(progress, config.smooth_steps, causal=False)
    if config.rule == "dead_band":
        return dead_band_kinds(
            curve, config.move, config.rise_per_step, config.fall_per_step, config.regain_margin, config.move / 2
        )
    n = curve.size
    half = config.slope_steps / 2
    index = np.arange(n)
    lo = np.clip(np.floor(index - half).astype(int), 0, n - 1)
    hi = np.clip(np.ceil(index + half).astype(int), 0, n - 1)
    slope = np.where(hi > lo, (curve[hi] - curve[lo]) / np.maximum(hi - lo, 1), 0.0)
    best = best_before(curve)
    kinds: list[str] = []
    for t in range(n):
        if slope[t] >= config.rise_per_step:
            kinds.append("recovery" if curve[t] < best[t] - config.regain_margin else "progress")
        elif slope[t] <= -config.fall_per_step:
            kinds.append("failure_inducing")
        else:
            kinds.append("idle")
    return kinds


def _runs(kinds: list[str]) -> list[tuple[int, int, str]]:
    runs: list[tuple[int, int, str]] = []
    for t, kind in enumerate(kinds):
        if runs and runs[-1][2] == kind:
            runs[-1] = (runs[-1][0], t + 1, kind)
        else:
            runs.append((t, t + 1, kind))
    return runs


def _merge_short(runs: list[tuple[int, int, str]], min_steps: int) -> list[tuple[int, int, str]]:
    merged: list[tuple[int, int, str]] = []
    for start, stop, kind in runs:
        if merged and (stop - start < min_steps or merged[-1][2] == kind):
            merged[-1] = (merged[-1][0], stop, merged[-1][2])
        else:
            merged.append((start, stop, kind))
    if len(merged) > 1 and merged[0][1] - merged[0][0] < min_steps:  # a short first run joins the next
        (first_start, _, _), (_, stop, kind) = merged[0], merged[1]
        merged[:2] = [(first_start, stop, kind)]
    return merged
