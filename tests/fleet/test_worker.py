"""Sim workers: exact rewinds by checkpoint and replay, and several slots sharing one process."""

from __future__ import annotations

import time
from collections import deque

import numpy as np
import pytest

from vla_recover.fleet.slot import Slot
from vla_recover.fleet.states import SlotMachine
from vla_recover.fleet.worker import EPISODE_OVER, SimWorkerCore, SimWorkerSpec, WorkerDied, WorkerHandle, WorkerProcess

SPEC = SimWorkerSpec("LiftCube", {"horizon": 100}, {"action_noise": 0.05}, rewind_capacity=25)


def test_a_rewind_restores_the_exact_state_of_any_kept_step() -> None:
    core = SimWorkerCore(SPEC)
    core.handle(("reset", 3))
    before: list[np.ndarray] = []  # the physics before each step, captured directly
    actions = np.random.default_rng(0).uniform(-1, 1, (47, 5))  # a trajectory worth checking, that never succeeds
    for action in actions:
        before.append(core.env.unwrapped.get_state().physics)
        assert core.handle(("step", action))[2] is False
    assert isinstance(core.handle(("rewind_to", 21)), ValueError)  # beyond the capacity: forgotten
    for target in (44, 31, 22):  # between checkpoints, on one, and the oldest kept (47 - 25)
        core.handle(("rewind_to", target))
        assert core.step == target
        np.testing.assert_array_equal(core.env.unwrapped.get_state().physics, before[target])
    assert isinstance(core.handle(("rewind_to", 22)), ValueError)  # only ever back from where it is now
    for _ in range(9):  # a new branch from the rewound state, then back into it
        before[core.step] = core.env.unwrapped.get_state().physics
        core.handle(("step", [0.2, 0.0, 0.0, 0.0, 1.0]))
    core.handle(("rewind_to", 26))
    np.testing.assert_array_equal(core.env.unwrapped.get_state().physics, before[26])
    core.close()


def test_a_second_rewind_reaches_back_from_the_furthest_step_as_the_fleet_asks() -> None:
    """After a rewind, the window stays anchored where the attempt got furthest: the checkpoints further back were
    dropped then, and the fleet's slot asks for no earlier step than the worker can restore."""
    core = SimWorkerCore(SPEC)
    core.handle(("reset", 4))
    slot = Slot("r0", SlotMachine("r0"), worker=None, history=deque())  # type: ignore[arg-type]
    before: list[np.ndarray] = []
    for action in np.random.default_rng(1).uniform(-1, 1, (60, 5)):
        before.append(core.env.unwrapped.get_state().physics)
        core.handle(("step", action))
        slot.branch_rows.append(len(slot.branch_rows))
    core.handle(("rewind_to", 40))
    slot.cut_branch(40)
    assert slot.oldest_rewind_target(SPEC.rewind_capacity) == 35  # 60 - 25, not 40 - 25
    assert isinstance(core.handle(("rewind_to", 20)), ValueError)  # once a crash: no checkpoint at or before it
    core.handle(("rewind_to", 35))
    np.testing.assert_array_equal(core.env.unwrapped.get_state().physics, before[35])
    core.close()


def test_steps_that_ran_ahead_past_the_end_are_not_taken_until_a_reset_or_rewind() -> None:
    core = SimWorkerCore(SimWorkerSpec("LiftCube", {"horizon": 12}, {}, rewind_capacity=25))
    core.handle(("reset", 0))
    replies = [core.handle(("step", [0.0, 0.0, 0.0, 0.0, -1.0])) for _ in range(15)]
    assert [reply[3] for reply in replies[:12]] == [False] * 11 + [True]  # truncated at the horizon
    assert replies[12:] == [EPISODE_OVER] * 3 and core.step == 12  # the sim stayed where the episode ended
    core.handle(("rewind_to", 10))
    assert core.handle(("step", [0.0, 0.0, 0.0, 0.0, -1.0]))[3] is False and core.step == 11
    core.handle(("reset", 1))
    assert core.handle(("step", None))[3] is False and core.step == 1
    core.close()


def test_slots_sharing_a_process_step_in_one_message_and_a_crash_reaches_each() -> None:
    process = WorkerProcess(SPEC, 3, "shared")
    slots = [WorkerHandle(SPEC, f"slot{i}", process, i) for i in range(3)]
    try:
        states = [slot.call("reset", 10 + i)[0]["state"] for i, slot in enumerate(slots)]
        assert not np.allclose(states[0], states[1])  # each slot has its own sim
        for slot in slots:
            slot.send("step", [0.0, 0.0, 0.1, 0.0, -1.0])
        slots[0].flush()
        replies = [slot.receive() for slot in slots]
        assert all(reply[0]["state"].shape == states[0].shape for reply in replies)
        assert len({slot.pid for slot in slots}) == 1

        slots[1].kill()
        slots[1].send("step", None)
        with pytest.raises(WorkerDied):
            slots[1].flush()
            slots[1].receive(timeout=10)
        slots[1].restart()  # a fresh process for all three
        with pytest.raises(WorkerDied, match="was restarted"):
            slots[0].send("step", None)
        slots[0].restart()  # its neighbour's restart already gave it a fresh sim: no second restart
        slots[2].restart()
        assert process.generation == 1
        assert all(slot.call("reset", 1)[0]["state"].shape == states[0].shape for slot in slots)
    finally:
        for slot in slots:
            slot.close()
    assert not process.process.is_alive()


def test_a_worker_process_counts_the_time_it_waits_for_requests() -> None:
    process = WorkerProcess(SPEC, 1, "timed")
    slot = WorkerHandle(SPEC, "slot0", process, 0)
    try:
        slot.call("reset", 0)
        before = process.waited_s
        time.sleep(0.5)  # the worker sits in its receive: the wait counts while it lasts
        assert 0.4 <= process.waited_s - before < 5.0
        slot.call("step", [0.0, 0.0, 0.0, 0.0, -1.0])
        assert 0.4 <= process.waited_s - before < 5.0
    finally:
        slot.close()


def test_a_probe_says_whether_the_expert_could_still_finish_from_a_past_state_and_moves_nothing() -> None:
    core = SimWorkerCore(SimWorkerSpec("LiftCube", {"horizon": 60}, {"action_noise": 0.05}))
    core.handle(("reset", 7))
    for _ in range(23):
        core.handle(("step", [0.0, 0.0, 0.0, 0.0, -1.0]))  # the arm stays put: 37 steps are left
    physics = core.env.unwrapped.get_state().physics
    assert core.handle(("recoverable", 0)) is True  # from the start the expert lifts the cube
    assert core.handle(("recoverable", None)) is True  # and with 37 steps left too
    np.testing.assert_array_equal(core.env.unwrapped.get_state().physics, physics)  # the robot's sim untouched
    for _ in range(33):
        core.handle(("step", [0.0, 0.0, 0.0, 0.0, -1.0]))
    assert core.handle(("recoverable", None)) is False  # 4 steps are too few to reach, grasp and lift
    assert core.handle(("recoverable", 23)) is True  # back then there was time
    assert isinstance(core.handle(("recoverable", 57)), ValueError)  # a step not taken yet
    core.close()
