"""Human-effort accounting: what a fleet run cost in operator time and what it bought."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EffortLedger", "return_on_human_effort"]


@dataclass
class EffortLedger:
    operator_s: dict[str, float] = field(default_factory=dict)  # role → seconds operators were busy
    robot_s: float = 0.0  # robot time (sim or wall) spent in episodes, resets and waits
    robot_waiting_s: float = 0.0  # robot time spent waiting for a human (takeover queue, reset queue)
    interventions: int = 0
    rewinds: int = 0
    episodes: Counter[str] = field(default_factory=Counter)  # outcome → count
    rejected_actions: int = 0
    clipped_actions: int = 0  # policy actions a little outside the bounds, clipped into them
    steps: int = 0  # control steps the robots executed (a rewind's restores are not steps)
    human_steps: int = 0  # of those, steps a human chose (Fleet-DAgger's human effort)

    def charge(self, role: str, seconds: float) -> None:
        self.operator_s[role] = self.operator_s.get(role, 0.0) + seconds

    def count_step(self, actor: str) -> None:
        self.steps += 1
        self.human_steps += actor == "human"

    def summary(self, present_s: dict[str, float] | None = None, humans: int = 0, robots: int = 0) -> dict[str, Any]:
        """``present_s``: role → seconds its operators were on shift (busy or watching), as a wage is paid;
        ``humans`` and ``robots``: how many of each the fleet had (ROHE scales by their ratio)."""
        operator_hours = sum(self.operator_s.values()) / 3600.0
        present_hours = sum((present_s or {}).values()) / 3600.0
        successes = self.episodes["success"]
        return {
            "episodes": sum(self.episodes.values()),
            "outcomes": dict(self.episodes),
            "successes": successes,
            "interventions": self.interventions,
            "rewinds": self.rewinds,
            "rejected_actions": self.rejected_actions,
            "clipped_actions": self.clipped_actions,
            "operator_s": {role: round(s, 1) for role, s in sorted(self.operator_s.items())},
            "robot_hours": round(self.robot_s / 3600.0, 4),
            "robot_waiting_s": round(self.robot_waiting_s, 1),
            "successes_per_robot_hour": round(successes / (self.robot_s / 3600.0), 2) if self.robot_s else 0.0,
            "successes_per_operator_hour": round(successes / operator_hours, 2) if operator_hours else None,
            "operator_present_s": {role: round(s, 1) for role, s in sorted((present_s or {}).items())},
            "successes_per_present_hour": round(successes / present_hours, 2) if present_hours else None,
            "steps": self.steps,
            "human_steps": self.human_steps,
            "intervention_rate": round(self.human_steps / self.steps, 4) if self.steps else 0.0,
            "rohe": return_on_human_effort(successes, self.human_steps, humans, robots),
        }


def return_on_human_effort(successes: int, human_steps: int, humans: int, robots: int) -> float | None:
    """Fleet-DAgger's ROHE, (humans / robots) · successes / (1 + human action steps): successes per robot over
    human action steps per person (plus one). None without robots."""
    if robots <= 0:
        return None
    return round(successes / (1 + human_steps) * (humans / robots), 4)
