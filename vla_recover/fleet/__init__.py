"""The fleet: robot slots, batched inference, the operator API, simulated operators.

>>> from vla_recover.fleet import FleetConfig, build_fleet
"""

from __future__ import annotations

from pathlib import Path

from vla_recover.fleet.config import FleetConfig, FloorOperatorConfig, TeleoperatorConfig
from vla_recover.fleet.inference import ChunkSource
from vla_recover.fleet.manager import FleetManager
from vla_recover.fleet.slot import Slot
from vla_recover.fleet.states import TRANSITIONS, IllegalTransition, SlotState

__all__ = [
    "TRANSITIONS",
    "FleetConfig",
    "FleetManager",
    "FloorOperatorConfig",
    "IllegalTransition",
    "Slot",
    "SlotState",
    "TeleoperatorConfig",
    "build_fleet",
]


def build_fleet(
    config: FleetConfig, source: ChunkSource | None = None, views: str | Path | None = None
) -> FleetManager:
    """A fleet with the simulated operators its config enables; ``source`` replaces the config's policy; ``views``: a
    folder where its sim robots' views are painted for people watching (vla_recover.fleet.views)."""
    from vla_recover.teleop.operators import SimFloorOperator, SimTeleoperator

    fleet = FleetManager(config, source, views)
    floor, teleop = config.floor_operator, config.teleoperator
    if floor.enabled:
        fleet.operators += [SimFloorOperator(floor, f"floor-{i + 1}") for i in range(floor.count)]
        fleet.auto_reset = floor.resets == "automatic"
    if teleop.enabled:
        fleet.operators += [SimTeleoperator(teleop, f"teleop-{i + 1}") for i in range(teleop.count)]
    return fleet
