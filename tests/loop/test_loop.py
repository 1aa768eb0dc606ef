"""The loop's debug preset end to end, its resume after a kill between rounds, and config errors."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from vla_recover.config import ConfigError, load_yaml, validate_config
from vla_recover.data import EpisodeStore
from vla_recover.loop.config import QUICKSTART, LoopConfig
from vla_recover.loop.promotion import PromotionConfig, decide, difference_lower_bound
from vla_recover.loop.runner import BASE_STEPS, DONE, FIRST_ROUND_STEPS, STARTED, LoopRun

ROOT = Path(__file__).resolve().parents[2]
DEBUG = ROOT / "configs" / "loop" / "debug.yaml"
ALL_SHARED = (*BASE_STEPS, *FIRST_ROUND_STEPS)  # what seed_first_round takes


def _debug_config(tmp_path: Path, **changes: object) -> Path:
    raw = load_yaml(DEBUG)
    raw.update(out=str(tmp_path / "run"), **changes)
    path = tmp_path / "loop.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _events(run: Path, kind: str) -> list[dict[str, object]]:
    with EpisodeStore(run / "store") as store:
        return [e.payload for e in store.events(kind=kind)]


class RecordingReporter:
    def __init__(self) -> None:
        self.advanced: list[tuple[int, str]] = []

    def begin(self, step: str, total: int | None) -> None:
        pass

    def advance(self, completed: int, status: str = "") -> None:
        self.advanced.append((completed, status))

    def end(self, step: str, result: dict[str, object], reused: bool) -> None:
        pass


@pytest.mark.slow  # two loop rounds, a kill and a resume: two to three minutes on two cores
def test_debug_loop_runs_two_rounds_and_resumes_after_a_kill(tmp_path: Path) -> None:
    config = _debug_config(tmp_path)
    run = tmp_path / "run"
    command = [sys.executable, "-m", "vla_recover.cli.main", "loop", "--config", str(config)]
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)  # fmt: skip
    try:
        while process.poll() is None:  # kill the whole process group once round 1 is decided
            if (run / "store" / "index.sqlite").exists() and any(
                e["step"] == "round_1.decide" for e in _events(run, DONE)
            ):
                os.killpg(process.pid, signal.SIGKILL)
                break
            time.sleep(0.2)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == -signal.SIGKILL, process.stderr.read() if process.stderr else ""
    assert not (run / "report.md").exists()
    done_before = {str(e["step"]) for e in _events(run, DONE)}
    assert {"demos", "base_train", "base_eval", "round_1.fleet", "round_1.decide"} <= done_before

    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert time.monotonic() - started < 240
    final = json.loads(result.stdout.strip().splitlines()[-1])
    assert final["policy"] in ("base", "round_1", "round_2")
    starts = [str(e["step"]) for e in _events(run, STARTED)]
    for step in done_before:  # finished steps were read back from the log, not run again
        assert starts.count(step) == 1, step
    assert {"round_2.fleet", "round_2.train", "round_2.decide", "report"} <= {
        str(e["step"]) for e in _events(run, DONE)
    }
    summary = json.loads((run / "summary.json").read_text())
    assert [r["round"] for r in summary["rounds"]] == [0, 1, 2]
    r_all = summary["rounds"][1:]
    # every policy also met the final-test seeds, after every decision, and the run's figure is its winner's there
    assert [r["final_test"]["seeds"] for r in summary["rounds"]] == [list(range(200_000, 200_004))] * 3
    assert final["final_test_success"] == summary["final"]["final_test"]["success_rate"]
    assert all(s not in starts[: starts.index("round_2.decide")] for s in ("base_final_test", "round_1.final_test"))
    assert (run / "report.md").is_file() and (run / "plots" / "success_rate.png").is_file()
    # the operators' presence over both rounds, spent instead on demonstrations, tested on the same seeds
    baseline, present = summary["baseline"], sum(sum(r["fleet"]["operator_present_s"].values()) for r in r_all)
    assert baseline["method"] == "more_demos" and baseline["loop_human_s"] == pytest.approx(present, abs=0.2)
    assert baseline["human_s"] >= baseline["loop_human_s"] and baseline["demos"] >= 1
    assert baseline["test"]["seeds"] == list(range(200_000, 200_004))
    paired = baseline["paired"]  # the promoted policy against the baseline, seed by seed
    promoted_outcomes, baseline_outcomes = summary["final"]["final_test"]["outcomes"], baseline["test"]["outcomes"]
    assert paired["shared_seeds"] == 4
    assert paired["loop_only"] == sum(a > b for a, b in zip(promoted_outcomes, baseline_outcomes, strict=True))
    assert final["baseline_success"] == baseline["test"]["success_rate"]
    assert "## What the human time bought" in (run / "report.md").read_text()
    if (os.cpu_count() or 1) >= 2:  # the resumed run's final tests and baseline fine-tune ran beside its rounds
        assert set(summary["beside_s"]) == {"base_final_test", "round_1.final_test", "round_2.final_test",
                                            "baseline.train", "baseline.test"}  # fmt: skip
        assert "ran beside the rounds" in (run / "report.md").read_text()
        # and nothing the rounds compute changed: the demonstrations bought beside them reach no round's data
        # (in a fresh process, as the CLI's: a test before this one may have left this process on one torch thread)
        in_line_run = (
            "import sys; from vla_recover.config import load_yaml, validate_config; "
            "from vla_recover.loop.config import LoopConfig; from vla_recover.loop.runner import LoopRun; "
            "LoopRun(validate_config(LoopConfig, {**load_yaml(sys.argv[1]), 'out': sys.argv[2]})).run()"
        )
        done = subprocess.run([sys.executable, "-c", in_line_run, str(config), str(tmp_path / "in_line")], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        in_line = json.loads((tmp_path / "in_line" / "summary.json").read_text())
        for ours, theirs in zip(summary["rounds"][1:], in_line["rounds"][1:], strict=True):
            assert ours["segments"] == theirs["segments"] and ours["train"]["weights"] == theirs["train"]["weights"]
            assert ours["train"]["final_loss"] == theirs["train"]["final_loss"]
            assert ours["eval"]["outcomes"] == theirs["eval"]["outcomes"]
    decisions = _events(run, "policy_promoted") + _events(run, "policy_discarded")
    assert len(decisions) == 2
    # each round trained on the demos plus every finished fleet round, never on a killed step's leftovers
    r1, r2 = summary["rounds"][1], summary["rounds"][2]
    assert r2["fleet"]["episodes"] == 4 and r1["segments"]
    # round 2's floor operator watched the critic trained in round 1
    assert r1["fleet"]["critic"] is None and Path(r2["fleet"]["critic"]) == run / "critics" / "round_1"
    # an evaluation step reports its episodes and successes as batches finish, for the progress bar
    reporter = RecordingReporter()
    evaluation = LoopRun(validate_config(LoopConfig, load_yaml(config)), reporter)._evaluate(
        str(run / "policies" / "base" / "policy")
    )
    assert reporter.advanced == [(4, f"{evaluation['successes']} successes")]


def test_a_run_folder_refuses_a_different_config(tmp_path: Path) -> None:
    raw = load_yaml(DEBUG)
    first = validate_config(LoopConfig, {**raw, "out": str(tmp_path / "run")})
    LoopRun(first)
    changed = validate_config(LoopConfig, {**raw, "out": str(tmp_path / "run"), "rounds": 3})
    with pytest.raises(ValueError, match="rounds"):
        LoopRun(changed)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"method": "dagger"}, "method"),
        ({"rounds": -1}, "rounds"),
        ({"base_train": {"steps": 0}}, "steps"),
        ({"base_train": {"data": "x"}}, "base_train"),
        ({"fleet": {"robots": "many"}}, "robots"),
        ({"fleet": {"store": "x"}}, "fleet"),
        ({"fleet": {"task_config": {"horizon": 50}}}, "fleet.task_config: got {'horizon': 50}; the fleet meets"),
        ({"fleet": {"seed": 99_990}}, "fleet.seed"),
        ({"critic": {"steps": -5}}, "steps"),
        ({"weighting": {"weighter": "nope"}}, "weighter"),
        ({"promotion": {"confidence": 1.5}}, "confidence"),
        ({"seed_first_round": True}, "seed_first_round"),
        ({"seed_first_round": True, "seed_from": "x", "method": "reguide"}, "seed_first_round"),
        ({"evaluation": {"episodes": 0}}, "episodes"),
        ({"final_test": {"seed": 100_002}}, "final_test.seed: got 100002; the final-test seeds must start at or above"),
        ({"task": "LiftCub"}, "task: unknown task 'LiftCub'; valid task ids: vla_recover/LiftCube-v0"),
        ({"task_config": {"bogus": 1}}, "bogus"),
        ({"demos": {"starts": 10, "starts_seed": 99_995}}, "demos.starts_seed: got 99995; its 10 starts reach"),
    ],
)
def test_bad_loop_configs_name_the_field(change: dict[str, object], field: str) -> None:
    raw = {**load_yaml(DEBUG), **change}
    with pytest.raises((ConfigError, ValueError), match=field):
        validate_config(LoopConfig, raw, source="test")


def test_demo_starts_add_two_step_episodes_from_their_own_seeds(tmp_path: Path) -> None:
    raw = {**load_yaml(DEBUG), "out": str(tmp_path / "run"), "rounds": 0, "demos": {"episodes": 3, "starts": 4}}
    summary = LoopRun(validate_config(LoopConfig, raw)).run()
    with EpisodeStore(tmp_path / "run" / "store") as store:
        rows = store.episodes()
    starts = [row for row in rows if row.info["seed"] >= 50_000]
    assert sorted(row.info["seed"] for row in starts) == [50_000, 50_001, 50_002, 50_003]
    assert {row.stop - row.start for row in starts} == {2}
    assert len(rows) == 7 and all(row.stop - row.start > 2 for row in rows if row not in starts)
    assert summary["rounds"][0]["policy"] == "base"


def _logged_run(out: Path, steps: tuple[str, ...], **changes: object) -> dict[str, object]:
    """A one-round run folder whose log says ``steps`` finished (nothing ran): enough to seed another run from."""
    raw = {**load_yaml(DEBUG), "method": "hitl_bc", "rounds": 1, "out": str(out), **changes}
    LoopRun(validate_config(LoopConfig, raw))
    with EpisodeStore(out / "store", mode="a") as store:
        for step in steps:
            store.append_event(DONE, "loop", {"step": step, "attempt": 0, "result": {"of": str(out)}})
    (out / "critics" / "round_1").mkdir(parents=True)
    (out / "critics" / "round_1" / "model.pt").write_bytes(b"critic")
    return raw


def test_seed_first_round_takes_the_fleet_round_and_critic_only(tmp_path: Path) -> None:
    raw = _logged_run(tmp_path / "source", (*ALL_SHARED, "round_1.train", "round_1.eval"))
    shared = {**raw, "out": str(tmp_path / "ours"), "seed_from": str(tmp_path / "source"), "seed_first_round": True}
    config = validate_config(LoopConfig, {**shared, "weighting": {"retention": "critic"}})
    carried = set(ALL_SHARED)
    assert set(LoopRun(config).results) == carried
    assert set(LoopRun(config).results) == carried  # and again when the run resumes
    assert (tmp_path / "ours" / "critics" / "round_1" / "model.pt").read_bytes() == b"critic"
    plain = validate_config(LoopConfig, {**shared, "out": str(tmp_path / "plain"), "seed_first_round": False})
    assert set(LoopRun(plain).results) == set(BASE_STEPS)


@pytest.mark.parametrize(
    ("theirs", "finished", "message"),
    [
        ({"rounds": 2}, ALL_SHARED, "one-round"),
        ({"method": "reguide"}, ALL_SHARED, "runs the plain policy"),
        ({"fleet": {"robots": 2, "episodes": 3}}, ALL_SHARED, r"different \['fleet'\]"),
        ({"critic": {"steps": 7}}, ALL_SHARED, r"different \['critic'\]"),
        ({}, (*BASE_STEPS, "round_1.fleet"), r"not finished \['round_1.critic'\]"),
    ],
)
def test_seed_first_round_refuses_a_round_that_does_not_apply(
    tmp_path: Path, theirs: dict[str, object], finished: tuple[str, ...], message: str
) -> None:
    source = _logged_run(tmp_path / "source", finished, **theirs)
    ours = {**load_yaml(DEBUG), "method": "hitl_bc", "rounds": 1, "out": str(tmp_path / "ours")}
    config = validate_config(LoopConfig, {**ours, "seed_from": source["out"], "seed_first_round": True})
    with pytest.raises(ValueError, match=message):
        LoopRun(config)


def test_a_run_saved_before_a_new_field_resumes(tmp_path: Path) -> None:
    config = validate_config(LoopConfig, {**load_yaml(DEBUG), "out": str(tmp_path / "run")})
    LoopRun(config)
    saved = tmp_path / "run" / "config.json"
    older = {k: v for k, v in json.loads(saved.read_text()).items() if k not in ("seed_first_round", "baseline")}
    del older["demos"]["conditions"]  # a section's field, too
    older["reguide"]["absorb"] = "ft"  # a section's field removed since (the method says it now)
    saved.write_text(json.dumps(older))
    # the missing fields read as their defaults, the removed one is left out, and a run from before the baseline
    # existed ran none
    with pytest.raises(ValueError, match=r"fields \['baseline'\] differ"):
        LoopRun(config)
    LoopRun(config.model_copy(update={"baseline": "none"}))
    older["fleet"] = {**older["fleet"], "robots": 3}
    saved.write_text(json.dumps(older))
    with pytest.raises(ValueError, match=r"fields \['fleet'\] differ"):
        LoopRun(config.model_copy(update={"baseline": "none"}))  # a free-form section is compared as saved


def test_quickstart_yaml_is_the_embedded_default() -> None:
    quickstart = validate_config(LoopConfig, load_yaml(ROOT / "configs" / "loop" / "quickstart.yaml"))
    assert quickstart == LoopConfig(**QUICKSTART)
    nominal = validate_config(LoopConfig, load_yaml(ROOT / "configs" / "loop" / "lift_nominal.yaml"))
    assert nominal == LoopConfig(name="lift_nominal")  # the same run without the injected failures


def test_promotion_needs_a_confident_gain() -> None:
    config = PromotionConfig(confidence=0.9)
    assert decide({"successes": 45, "episodes": 50}, {"successes": 20, "episodes": 50}, config).promote
    assert not decide({"successes": 24, "episodes": 50}, {"successes": 20, "episodes": 50}, config).promote
    assert not decide({"successes": 2, "episodes": 3}, {"successes": 1, "episodes": 3}, config).promote
    # the bound tightens with more episodes
    assert difference_lower_bound(60, 100, 40, 100, 0.9) > difference_lower_bound(6, 10, 4, 10, 0.9)
    with pytest.raises(ValueError, match="episodes"):
        difference_lower_bound(1, 0, 1, 10, 0.9)


def _evaluation(wins: set[int], seeds: range = range(100_000, 100_100)) -> dict[str, object]:
    outcomes = [int(seed in wins) for seed in seeds]
    return {"successes": sum(outcomes), "episodes": len(seeds), "seeds": list(seeds), "outcomes": outcomes}


def test_promotion_pairs_the_shared_seeds() -> None:
    """On shared seeds the test reads only where the two disagree: 8 seeds won only by the candidate and none lost
    is a clear gain (68% vs 60%) that two independent success rates could not show; 10 won and 8 lost is not."""
    config = PromotionConfig(confidence=0.9)
    current = _evaluation(set(range(100_000, 100_060)))
    better = decide(_evaluation(set(range(100_000, 100_068))), current, config)
    assert better.promote and better.test == "mcnemar"
    assert (better.shared_seeds, better.candidate_only, better.current_only) == (100, 8, 0)
    assert better.p_value == pytest.approx(0.5**8)
    assert difference_lower_bound(68, 100, 60, 100, 0.9) < 0  # the unpaired bound would have kept the incumbent
    mixed = decide(_evaluation(set(range(100_008, 100_070))), current, config)
    assert not mixed.promote and (mixed.candidate_only, mixed.current_only) == (10, 8)
    assert mixed.p_value == pytest.approx(sum(math.comb(18, k) for k in range(10, 19)) / 2**18, rel=1e-5)
    # results without per-seed outcomes (saved before evaluations kept them) fall back to the unpaired bound
    unpaired = decide({"successes": 68, "episodes": 100}, {"successes": 60, "episodes": 100}, config)
    assert unpaired.test == "newcombe" and not unpaired.promote and unpaired.diff_lower_bound is not None
