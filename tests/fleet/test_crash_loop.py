"""A worker that keeps dying ends the run with an error naming the robot, instead of being restarted forever."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.fleet.test_fleet import fleet_config, tick_until
from vla_recover.cli.main import app
from vla_recover.data import EpisodeStore
from vla_recover.fleet import FleetManager, SlotState, build_fleet
from vla_recover.fleet.worker import WorkerCrashLoop

S = SlotState


def kill_after_steps(fleet: FleetManager, robot: str, steps: int) -> None:
    """Kill ``robot``'s worker once its attempt has ``steps`` steps, and tick until the fleet has seen it die."""
    slot = fleet.slots[robot]
    tick_until(fleet, lambda: slot.state is S.AUTONOMOUS and len(slot.branch_rows) == steps)
    slot.worker.kill()
    tick_until(fleet, lambda: slot.state is not S.AUTONOMOUS)


def test_a_finished_episode_between_deaths_resets_the_count_and_deaths_in_a_row_end_the_run(tmp_path: Path) -> None:
    fleet = build_fleet(
        fleet_config(tmp_path, robots=1, episodes=6, task_config={"horizon": 20}, max_consecutive_faults=2)
    )
    fleet.start()
    try:
        kill_after_steps(fleet, "sim00", 5)  # one death ...
        slot = fleet.slots["sim00"]
        assert slot.faults_in_a_row == 1
        tick_until(fleet, lambda: fleet.ledger.episodes["truncated"] == 1)  # ... then an episode runs to its end
        assert slot.faults_in_a_row == 0
        kill_after_steps(fleet, "sim00", 5)
        with pytest.raises(WorkerCrashLoop, match=r"robot sim00: its worker died 2 times in a row.*"
                           r"max_consecutive_faults: 2\); last cause: "):  # fmt: skip
            kill_after_steps(fleet, "sim00", 5)
        with pytest.raises(WorkerCrashLoop):  # the fleet stays stopped (an operator's call may have hit the limit)
            fleet.tick()
    finally:
        fleet.close()
    with EpisodeStore(tmp_path / "store") as store:  # what each death interrupted is kept
        outcomes = sorted(row.outcome for row in store.episodes())
    assert outcomes == ["aborted", "aborted", "aborted", "truncated"]


def test_the_fleet_command_reports_a_crash_loop_as_an_error_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def always_dies(self: FleetManager) -> None:
        raise WorkerCrashLoop("robot sim00: its worker died 3 times in a row")

    monkeypatch.setattr(FleetManager, "tick", always_dies)
    config = tmp_path / "fleet.yaml"
    config.write_text(
        f"task: LiftCube\nrobots: 1\nepisodes: 1\nconstant_action: [0, 0, 0, 0, 0]\nstore: {tmp_path}/s\n"
    )
    result = CliRunner().invoke(app, ["fleet", "--config", str(config)])
    assert result.exit_code == 2, result.output
    assert "robot sim00: its worker died 3 times in a row" in result.output
