"""The slot state machine: the documented path works, everything else raises naming both states."""

from __future__ import annotations

import pytest

from vla_recover.fleet import TRANSITIONS, IllegalTransition, SlotState
from vla_recover.fleet.states import SlotMachine

S = SlotState


def test_the_documented_cycle_is_legal_and_every_transition_is_reported() -> None:
    seen: list[tuple[str, str]] = []
    machine = SlotMachine("r0", lambda robot, old, new, reason: seen.append((str(old), str(new))))
    path = [S.AUTONOMOUS, S.TAKEOVER_REQUESTED, S.TELEOP, S.REWINDING, S.TELEOP, S.AUTONOMOUS, S.EPISODE_DONE]
    for state in [*path, S.RESETTING, S.IDLE]:
        machine.to(state)
    assert len(seen) == 9 and seen[0] == ("idle", "autonomous") and seen[-1] == ("resetting", "idle")


def test_illegal_transition_names_both_states() -> None:
    machine = SlotMachine("r7")
    with pytest.raises(IllegalTransition, match=r"robot r7: no transition idle → rewinding"):
        machine.to(S.REWINDING)
    assert machine.state is S.IDLE


def test_estop_is_reachable_from_everywhere_and_left_only_to_idle() -> None:
    assert all(S.ESTOPPED in TRANSITIONS[s] for s in SlotState if s is not S.ESTOPPED)
    assert TRANSITIONS[S.ESTOPPED] == {S.IDLE}
