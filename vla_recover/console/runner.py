"""The fleet's control loop on its own thread, with the console's calls run between ticks, in order.

`FleetManager` is not thread-safe, and it does not need to be: web requests never touch it directly. Each request
hands a function to `FleetRunner.call`, which the control thread runs between two ticks and whose result (or
exception) comes back to the request. Ten times a second, and after the calls that ask for it, the thread publishes
a plain-data snapshot of the fleet that any thread may read.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from vla_recover.curves import fell, progress_lost, stalled

__all__ = ["FleetRunner", "fleet_snapshot"]

log = logging.getLogger(__name__)

SMOOTH_STEPS = 5  # alerts read a trailing mean of progress
STALL_STEPS, STALL_GAIN = 60, 0.01  # less gain than this over this many steps shows a stall alert
FALL = 0.15  # smoothed progress this far below its best shows a failure alert


def _alerts(slot: Any, curve: list[float]) -> list[str]:
    state = str(slot.state)
    alerts = [name for name, on in (("fault", state == "fault"), ("estopped", state == "estopped")) if on]
    if state == "takeover_requested" or (state == "teleop" and slot.hold):
        alerts.append("waiting_for_human")
    if slot.awaiting_reset:
        alerts.append("reset_the_scene")
    if fell(curve, FALL, SMOOTH_STEPS):
        alerts.append("failure_predicted")
    elif stalled(curve, STALL_STEPS, STALL_GAIN, SMOOTH_STEPS):
        alerts.append("stall")
    return alerts


# how often the control thread publishes a snapshot between calls: as often as pages receive one (routes/fleet.py)
PUBLISH_EVERY_S = 0.1
CURVE_STEPS = 200  # the latest steps of each robot's progress curve sent with every update (its sparkline)
# how urgently a robot needs a person, most urgent first: the fleet page shows these robots first
ATTENTION = ("waiting_for_human", "reset_the_scene", "failure_predicted", "stall", "fault", "estopped")


def _attention(alerts: list[str]) -> int | None:
    """The rank (in ATTENTION) of the most urgent of a robot's alerts; None when it needs no one."""
    ranks = [ATTENTION.index(alert) for alert in alerts if alert in ATTENTION]
    return min(ranks) if ranks else None


def fleet_snapshot(fleet: Any) -> dict[str, Any]:
    """What the console shows, as JSON-ready data: one card per robot, the takeover queue, the effort ledger."""
    now = fleet.now()
    robots = []
    for name, slot in fleet.slots.items():
        curve = fleet.progress_curve(slot)
        lease = None
        if slot.lease is not None:
            lease = {"operator": slot.lease.operator, "expires_in_s": round(slot.lease.expires - now, 2)}
        progress = round(float(curve[-1]), 3) if curve and math.isfinite(curve[-1]) else None  # arms: no truth
        source = "critic" if fleet.critic is not None else "ground_truth"
        alerts = _alerts(slot, curve)
        robots.append({
            "robot": name,
            "state": str(slot.state),
            "task": fleet.task,
            "instruction": slot.attempt.instruction if slot.attempt is not None else "",
            "step": len(slot.branch_rows),
            "progress": progress,
            "progress_source": None if curve and progress is None else source,  # None: the robot reports none
            "in_state_s": round(time.monotonic() - slot.machine.since, 2),  # wall seconds, as people wait
            "paused": slot.paused,
            "awaiting_reset": slot.awaiting_reset,  # home; a person resets the scene, then confirms
            "lease": lease,
            "alerts": alerts,
            "attention": _attention(alerts),  # None: needs no one; else the rank of its most urgent alert
            "curve": [round(p, 3) if math.isfinite(p) else None for p in curve[-CURVE_STEPS:]],
            "cameras": sorted(k.removeprefix("images.") for k in (slot.obs or {}) if k.startswith("images.")),
            "view": fleet.views is not None and slot.worker.simulated,  # a view painted for people (/view)
            "robot_state": [round(float(x), 3) for x in slot.obs["state"]] if slot.obs and "state" in slot.obs else [],
        })  # fmt: skip
    waiting = [r for r in robots if r["state"] == "takeover_requested"]
    if fleet.config.teleoperator.allocation == "priority":  # the robot at most risk first, as the teleoperator serves
        order = sorted(waiting, key=lambda card: -progress_lost(fleet.progress_curve(fleet.slots[card["robot"]])))
    else:  # first come, first served
        order = sorted(waiting, key=_waited)
    return {
        "sim_time": round(now, 2),
        "ticks": fleet.ticks,
        "finished": fleet.finished,
        "running": True,
        "action_dim": fleet.action_dim,
        "robots": robots,
        "queue": [{"robot": r["robot"], "waiting_s": r["in_state_s"]} for r in order],
        "allocation": fleet.config.teleoperator.allocation,
        "control_dt": fleet.dt,
        "effort": fleet.ledger.summary(),
    }


def _waited(card: dict[str, Any]) -> float:
    return -float(card["in_state_s"])  # the longest wait first


class FleetRunner:
    """Ticks ``fleet`` on a thread (at the control rate when ``realtime``) until stopped."""

    def __init__(self, fleet: Any, realtime: bool = True) -> None:
        self.fleet = fleet
        self.realtime = realtime
        self._calls: queue.SimpleQueue[tuple[Callable[[Any], Any], Future[Any], bool]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._snapshot: dict[str, Any] = {}
        self._published = 0.0  # monotonic time of the last snapshot
        self._message: tuple[dict[str, Any], str] | None = None  # a snapshot and its WebSocket message

    def start(self) -> None:
        self.fleet.start()
        self._publish()
        self._thread = threading.Thread(target=self._run, name="fleet-control", daemon=True)
        self._thread.start()

    def snapshot(self) -> dict[str, Any]:
        return self._snapshot

    def snapshot_message(self) -> str:
        """The snapshot as the WebSocket's ``fleet`` message, encoded once however many pages read it."""
        snapshot, message = self._snapshot, self._message
        if message is None or message[0] is not snapshot:
            message = self._message = (snapshot, json.dumps({"type": "fleet", **snapshot}, separators=(",", ":")))
        return message[1]

    def call(self, function: Callable[[Any], Any], timeout: float = 10.0, publish: bool = True) -> Any:
        """``function(fleet)`` on the control thread, between ticks; its result, or its exception raised here.
        ``publish``: the snapshot shows its effect by the time it returns (a teleop command, 20 a second, does not
        need that: the next regular snapshot shows it)."""
        if self._thread is None or not self._thread.is_alive():
            raise RuntimeError("the fleet is not running")
        future: Future[Any] = Future()
        self._calls.put((function, future, publish))
        return future.result(timeout)

    def _publish(self) -> None:
        self._snapshot = fleet_snapshot(self.fleet)
        self._published = time.monotonic()

    def _run_calls(self) -> None:
        """Run the queued calls, publish the state they left where a caller asked to see it, then answer them."""
        answers: list[tuple[Future[Any], Any, Exception | None]] = []
        publish = False
        while True:
            try:
                function, future, wants_snapshot = self._calls.get_nowait()
            except queue.Empty:
                break
            publish = publish or wants_snapshot
            try:
                answers.append((future, function(self.fleet), None))
            except Exception as exc:  # the caller gets it; the control loop goes on
                answers.append((future, None, exc))
        if not answers:
            return
        with contextlib.suppress(Exception):  # a failed write surfaces in the next tick, which stops the fleet
            self.fleet.recorder.sync()  # what the calls logged is in the store when their callers hear back
        if publish:
            self._publish()
        for future, result, error in answers:
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(error)

    def _run(self) -> None:
        next_tick = time.monotonic()
        while not self._stop.is_set():
            self._run_calls()
            if not self.fleet.finished:
                try:
                    self.fleet.tick()
                except Exception:
                    log.exception("fleet tick failed; the fleet stops")
                    self._stop.set()
            if time.monotonic() - self._published >= PUBLISH_EVERY_S or self.fleet.finished:
                self._publish()
            next_tick += self.fleet.dt if self.realtime else 0.0
            pause = next_tick - time.monotonic()
            if pause > 0:
                self._stop.wait(pause)
            else:
                next_tick = time.monotonic()
        self._run_calls()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
        self.fleet.close()
