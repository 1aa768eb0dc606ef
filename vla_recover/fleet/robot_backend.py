"""A real (or fake) `Robot` as a fleet worker: the same requests as a sim worker, answered by the arm.

A robot has no reset button and no saved states: ``reset`` moves it home (with ``operator_resets``, the fleet then
waits for the floor operator to reset the scene and confirm it), and
``rewind_to`` retraces its path since that step: end-effector deltas are sent again negated, newest first, gripper as
it was then; absolute joint commands are replayed backwards (the positions it passed through, newest first). In the
fleet the robot is a `SafeRobot`, so these commands pass its safety filter like any other. There is no scripted
expert on a robot: a takeover needs a human device.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from vla_recover.fleet.worker import Worker, WorkerDied
from vla_recover.hardware.robot import Robot, RobotError
from vla_recover.hardware.safety import SafeRobot

__all__ = ["RobotWorker"]


class RobotWorker(Worker):
    """Answers worker requests synchronously in the fleet's process (the arm's driver does the I/O)."""

    def __init__(
        self,
        robot: Robot,
        name: str,
        horizon: int,
        instruction: str = "",
        command: Literal["ee_delta", "joint_position"] = "ee_delta",
        operator_resets: bool = False,
    ) -> None:
        self.robot, self.name, self.horizon, self.instruction = robot, name, horizon, instruction
        self.command, self.operator_resets = command, operator_resets
        self.safety_filtered = isinstance(robot, SafeRobot)
        self._answer: Any = None
        self._sent: list[np.ndarray] = []  # action actually sent at each step since the reset
        self.start()

    def start(self) -> None:
        self.robot.connect()

    def _info(self) -> dict[str, Any]:
        return {"instruction": self.instruction, "step": len(self._sent), "progress": float("nan"), "phase_index": -1}

    def _handle(self, request: tuple[Any, ...]) -> Any:
        kind = request[0]
        if kind == "reset":
            self._sent = []
            return self.robot.home(), self._info()
        if kind == "step":
            if request[1] is None:
                return ValueError(f"{self.name}: a robot has no scripted expert; take over with a device")
            requested = np.asarray(request[1], dtype=np.float64)
            sent = self.robot.send_action(requested)
            self._sent.append(sent)
            truncated = len(self._sent) >= self.horizon
            # what the safety filter (or the arm's own limits) made of the command: the row is not what was chosen
            replaced = sent.shape != requested.shape or not np.allclose(sent, requested, rtol=0.0, atol=1e-9)
            info = {**self._info(), "safety_replaced": bool(replaced)}
            return self.robot.get_observation(), info, False, truncated, sent.astype(np.float32)
        if kind == "rewind_to":
            target = int(request[1])
            if not 0 <= target <= len(self._sent):
                return ValueError(f"rewind: step {target} outside the {len(self._sent)} steps since the reset")
            for back in self._path_back(target):
                self.robot.send_action(back)
            del self._sent[target:]
            return self.robot.get_observation(), self._info()
        return ValueError(f"worker request: unknown kind {kind!r}")

    def _path_back(self, target: int) -> list[np.ndarray]:
        """The commands that retrace the steps after ``target``, newest first."""
        if self.command == "ee_delta":
            return [np.concatenate([-sent[:4], sent[4:]]) for sent in reversed(self._sent[target:])]
        if target == 0 and self._sent:
            raise ValueError("rewind: an arm with absolute commands cannot retrace its first step; reset it home")
        return [sent for sent in reversed(self._sent[target - 1 : -1])] if target < len(self._sent) else []

    def estop(self, who: str, reason: str) -> None:
        if isinstance(self.robot, SafeRobot):
            self.robot.estop(who, reason)

    def clear_estop(self, who: str) -> None:
        if isinstance(self.robot, SafeRobot):
            self.robot.clear_estop(who)

    def send(self, *request: Any) -> None:
        try:
            self._answer = self._handle(request)
        except RobotError as exc:
            raise WorkerDied(f"{self.name}: {exc}") from exc

    def _reply(self, timeout: float) -> Any:
        answer, self._answer = self._answer, None
        return answer

    def close(self, graceful: bool = True) -> None:
        if self.robot.is_connected:
            self.robot.disconnect()

    def kill(self) -> None:
        self.robot.disconnect()
