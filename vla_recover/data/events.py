"""What the event log says the fleet looks like now: a projection, rebuilt from events alone.

Every component records state changes as events (``slot_state`` with the new state, ``episode_started``,
``episode_recorded``, ``takeover_*``, ``estop``, …); the console and operators read the projection, so a run can
be replayed and audited from the log.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from vla_recover.data.index import Event

if TYPE_CHECKING:
    from vla_recover.data.store import EpisodeStore

__all__ = ["EVENT_KINDS", "RobotView", "project_robots"]

EVENT_KINDS: tuple[str, ...] = (
    "slot_state",  # payload: {"state": <fleet slot state>}
    "episode_started",  # payload: {"task", "instruction"}
    "episode_recorded",  # written by the store when an episode commits
    "episode_rejected",
    "takeover_requested",
    "takeover_granted",  # payload: {"operator"}
    "takeover_released",
    "rewind",  # payload: {"steps"}
    "reset",
    "estop",
    "estop_cleared",
    "labels_written",
    "training_run",
    "evaluation",
    "promotion",
    "discard",
    "store_recovered",
)


@dataclass(frozen=True)
class RobotView:
    robot: str
    state: str = "unknown"
    since: float = 0.0
    episode_in_progress: bool = False
    last_episode: int | None = None
    last_outcome: str | None = None
    lease_holder: str | None = None
    estopped: bool = False
    episodes_recorded: int = 0
    last_event: int = 0
    history: tuple[str, ...] = field(default=(), repr=False)


def _apply(view: RobotView, event: Event) -> RobotView:
    payload: dict[str, Any] = event.payload
    view = replace(view, last_event=event.id)
    kind = event.kind
    if kind == "slot_state":
        return replace(view, state=payload["state"], since=event.time, history=(*view.history, payload["state"]))
    if kind == "episode_started":
        return replace(view, episode_in_progress=True)
    if kind == "episode_recorded":
        return replace(
            view,
            episode_in_progress=False,
            last_episode=event.episode,
            last_outcome=payload.get("outcome"),
            episodes_recorded=view.episodes_recorded + 1,
        )
    if kind == "takeover_granted":
        return replace(view, lease_holder=payload.get("operator", event.actor))
    if kind == "takeover_released":
        return replace(view, lease_holder=None)
    if kind == "estop":
        return replace(view, estopped=True)
    if kind == "estop_cleared":
        return replace(view, estopped=False)
    return view


def project_robots(store: EpisodeStore, robot: str | None = None) -> dict[str, RobotView]:
    """The current view of every robot (or one) named in the event log."""
    views: dict[str, RobotView] = {}
    for event in store.events(robot=robot):
        if event.robot is None:
            continue
        views[event.robot] = _apply(views.get(event.robot, RobotView(event.robot)), event)
    return views
