"""One robot's attempt as it happens: steps, who was in control, and the supervision segments.

A full attempt (autonomous stretches, rewinds, corrections) is one episode; segments say who was in control where,
and each row's actor who chose its action: a hold no one chose is ``hold``. A rewind in sim is an exact restore,
recorded as the visited states in reverse (zero actions, actor ``rewind``) under a ``rewind`` segment, so the episode
shows what the robot went back through, as a real arm replaying its trajectory backwards would.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vla_recover.data import EpisodeData

__all__ = ["AttemptBuffer"]

_AUTONOMOUS = ("policy", "guided")


@dataclass
class AttemptBuffer:
    task: str
    robot: str
    instruction: str
    seed: int
    phases: tuple[str, ...]
    obs_keys: tuple[str, ...]
    control_dt: float
    policy_version: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    segments: list[tuple[int, int, str]] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    # the ground truth's failures (fleet.failures.Failure); None where there is no ground truth (a real robot)
    failures: list[Any] | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def add(
        self, obs: dict[str, np.ndarray], action: np.ndarray, actor: str, info: dict[str, Any], control: str
    ) -> None:
        """The observation the action was taken in, the action, who chose it (``actor``), who was in control
        (``control``: ``autonomous`` or ``intervention``), and the ground truth after it."""
        row: dict[str, Any] = {f"obs.{k}": np.asarray(obs[k]) for k in self.obs_keys}
        row["action"] = np.asarray(action, dtype=np.float32)
        row["actor"] = actor
        row["policy_version"] = self.policy_version if actor in _AUTONOMOUS else ""
        row["intervention"] = control == "intervention"
        row["phase"] = int(info.get("phase_index", -1))
        row["progress"] = float(info.get("progress", np.nan))
        row["wall_time"] = time.time()
        row["sim_time"] = len(self.rows) * self.control_dt
        self.rows.append(row)
        self._extend_segment(control)

    def add_rewind(self, rows_back: list[int]) -> None:
        """Record going back through the recorded rows ``rows_back`` (latest first), landing before the last."""
        start = len(self.rows)
        for source in rows_back:
            row = dict(self.rows[source])
            row["action"] = np.zeros_like(row["action"])
            row["actor"] = "rewind"
            row["policy_version"] = ""
            row["intervention"] = True
            row["wall_time"] = time.time()
            row["sim_time"] = len(self.rows) * self.control_dt
            self.rows.append(row)
        if len(self.rows) > start:
            self.segments.append((start, len(self.rows), "rewind"))

    def _extend_segment(self, kind: str) -> None:
        end = len(self.rows)
        if self.segments and self.segments[-1][2] == kind and self.segments[-1][1] == end - 1:
            start, _, _ = self.segments[-1]
            self.segments[-1] = (start, end, kind)
        else:
            self.segments.append((end - 1, end, kind))

    def to_episode(self, outcome: str, rows: tuple[int, int] | None = None, **info: Any) -> EpisodeData:
        """The attempt (or its rows ``[start, stop)``) as an episode to store."""
        start, stop = rows or (0, len(self.rows))
        chosen = self.rows[start:stop]
        segments = [
            (max(a, start) - start, min(b, stop) - start, kind)
            for a, b, kind in self.segments
            if a < stop and b > start
        ]
        steps: dict[str, np.ndarray] = {}
        for key in chosen[0]:
            if key in ("actor", "policy_version"):
                continue
            steps[key] = np.stack([np.asarray(row[key]) for row in chosen])
        steps["phase"] = steps["phase"].astype(np.int8)
        steps["progress"] = steps["progress"].astype(np.float32)
        return EpisodeData(
            task=self.task,
            steps=steps,
            robot=self.robot,
            instruction=self.instruction,
            outcome=outcome,
            actor=[row["actor"] for row in chosen],
            policy_version=[row["policy_version"] for row in chosen],
            phases=self.phases,
            info={"seed": self.seed, "policy_version": self.policy_version, **info},
            segments=segments,
        )

    def episodes(self, outcome: str, reason: str, tags: dict[str, Any], corrections: bool) -> list[EpisodeData]:
        """The attempt as one episode, tagged, and (``corrections``) each human intervention as one of its own."""
        info: dict[str, Any] = {"reason": reason, **tags}
        if self.failures is not None:  # as filed by now: a probe still in flight stays None
            info["failures"] = [f.as_json() for f in self.failures]
        made = [self.to_episode(outcome, **info)]
        if corrections:
            made += [self.to_episode(outcome, rows=rows, correction=True, **tags) for rows in self.corrections()]
        return made

    def corrections(self) -> list[tuple[int, int]]:
        """Step ranges of the human interventions, for emitting corrections as episodes of their own."""
        return [(start, stop) for start, stop, kind in self.segments if kind == "intervention"]
