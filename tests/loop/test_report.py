"""The loop's report: Markdown with every round, valid PNG plots, skipped plots named, malformed summaries refused."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from vla_recover.loop.report import write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ALL_PLOTS = (
    "success_rate.png",
    "throughput.png",
    "operator_time.png",
    "return_on_human_effort.png",
    "segment_mix.png",
    "intervention_rate.png",
)


def _eval(successes: int, low: float, high: float, episodes: int = 50) -> dict[str, Any]:
    return {"successes": successes, "episodes": episodes, "success_rate": successes / episodes,
            "ci95": [low, high], "mean_length": 120.0}  # fmt: skip


def _round(index: int, successes: int, promoted: bool, current: str, **extra: Any) -> dict[str, Any]:
    fleet = {
        "episodes": 24, "successes": 10 + index, "interventions": 8 - index, "rewinds": 3,
        "operator_s": {"floor": 120.0, "teleop": 60.0 - 10 * index}, "robot_hours": 0.2, "wall_s": 40.0,
        "control_steps_per_s": 900.0, "successes_per_robot_hour": 50.0 + 10 * index,
        "successes_per_operator_hour": 200.0 + 20 * index, "successes_per_present_hour": 31.5 + index,
        "human_steps": 100 * index, "rohe": round((10 + index) / (1 + 100 * index) * 3 / 8, 4),
        "outcomes": {"success": 10 + index, "failure": 14 - index},
    }  # fmt: skip
    return {
        "round": index, "policy": f"round_{index}", "promoted": promoted, "current": current,
        "eval": _eval(successes, successes / 50 - 0.12, successes / 50 + 0.13),
        "decision": {"candidate_rate": successes / 50, "current_rate": 0.4, "diff_lower_bound": -0.05,
                     "confidence": 0.9},
        "fleet": fleet, "segments": {"progress": 1200, "idle": 300, "failure_inducing": 200, "recovery": 100},
        "train": {"steps": 500, "wall_s": 80.0, "final_loss": 0.05, "weights": {"mean": 1.0, "zero_fraction": 0.2}},
        **extra,
    }  # fmt: skip


@pytest.fixture
def summary() -> dict[str, Any]:
    base = {"round": 0, "policy": "base", "eval": _eval(20, 0.28, 0.54), "promoted": True, "current": "base"}
    return {
        "name": "quickstart", "task": "LiftCube", "method": "habc", "eval_episodes": 50, "eval_seed": 100000,
        "rounds": [
            base,
            _round(1, 22, False, "base"),
            _round(2, 31, True, "round_2", guided={"chunks": 100, "guided_chunks": 20, "successes": 5,
                                                   "episodes": 12}),
            _round(3, 30, False, "round_2", segments={}),
        ],
        "timings_s": {"demos": 5.0, "base_train": 100.0, "fleet": 120.0, "train": 240.0, "eval": 60.0},
        "final": {"policy": "round_2", "final_test": None},
        "baseline": {"method": "more_demos", "loop_human_s": 900.0, "human_s": 905.0, "demos": 70,
                     "seeds": "promotion", "test": _eval(25, 0.37, 0.63)},
    }  # fmt: skip


def test_full_summary_writes_every_round_and_valid_pngs(tmp_path: Path, summary: dict[str, Any]) -> None:
    report = write_report(tmp_path, summary)
    assert report == tmp_path / "report.md"
    text = report.read_text()
    for rate in ("40.0%", "44.0%", "62.0%", "60.0%"):
        assert rate in text
    assert "LiftCube" in text and "habc" in text and "100000…100049" in text
    assert "28.0%, 54.0%" in text  # the CI of the base policy
    assert "skipped" not in text
    for name in ALL_PLOTS:
        png = tmp_path / "plots" / name
        assert png.read_bytes()[:8] == PNG_SIGNATURE, name
        assert f"](plots/{name})" in text
    # rounds 1 and 2 ran base in the fleet (round 1 was not promoted): 60/h then 70/h; round 3 ran round_2: 80/h
    assert "1.00×" in text and "1.17×" in text and "1.33×" in text
    assert "kept `base`" in text and "promoted `round_2`" in text
    assert "-5.0 pp" in text and "90.0% confidence" in text
    assert "20 of 100 chunks" in text
    assert "| 32.5 |" in text and "present operator-h" in text  # round 1's operators, paid for their whole shift
    assert "| 0.041 |" in text and "ROHE" in text  # round 1: three people, eight robots, 11 successes, 100 human steps
    assert "525.0 s" not in text and "8.8 min" in text  # total time, in minutes
    # the loop's human time against the same time spent on demonstrations, on the same seeds
    assert "15.0 min operators on shift (8.0 min busy)" in text and "70 demonstrations instead" in text
    assert "+22.0 pp" in text and "+10.0 pp" in text and "2.20× what the same time bought" in text


def test_base_only_summary_names_the_skipped_plots(tmp_path: Path) -> None:
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "throughput.png").write_bytes(b"stale")
    summary = {"rounds": [{"round": 0, "policy": "base", "eval": {"success_rate": 0.4, "ci95": [0.28, 0.54]}}]}
    text = write_report(tmp_path, summary).read_text()
    assert "40.0%" in text
    assert "nothing to promote" in text and "No timings recorded." in text
    assert (tmp_path / "plots" / "success_rate.png").read_bytes()[:8] == PNG_SIGNATURE
    for name in ALL_PLOTS[1:]:
        assert f"`{name}`): skipped" in text
        assert not (tmp_path / "plots" / name).exists()  # the stale picture is gone too


def test_missing_optional_fields_in_later_rounds(tmp_path: Path, summary: dict[str, Any]) -> None:
    for r in summary["rounds"][1:]:
        for key in ("fleet", "segments", "train", "guided", "decision"):
            r.pop(key, None)
    text = write_report(tmp_path, summary).read_text()
    assert "no decision recorded" in text
    assert "`segment_mix.png`): skipped" in text
    assert (tmp_path / "plots" / "success_rate.png").exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda s: s.pop("rounds"), "rounds"),
        (lambda s: s.update(rounds=[]), "rounds"),
        (lambda s: s["rounds"][1].pop("eval"), "rounds.1.eval"),
        (lambda s: s["rounds"][0]["eval"].update(success_rate=1.5), "rounds.0.eval.success_rate"),
        (lambda s: s["rounds"][2]["fleet"].update(operator_s={"floor": "long"}), "rounds.2.fleet.operator_s.floor"),
        (lambda s: s["rounds"][2].update(round=1), "rounds"),
    ],
)
def test_malformed_summary_names_the_field(tmp_path: Path, summary: dict[str, Any], change: Any, field: str) -> None:
    bad = copy.deepcopy(summary)
    change(bad)
    with pytest.raises(ValueError, match=f"'{field}'"):
        write_report(tmp_path, bad)
    assert not (tmp_path / "report.md").exists()


def test_a_more_demos_round_shows_the_demonstrations_its_human_time_bought(
    tmp_path: Path, summary: dict[str, Any]
) -> None:
    summary["method"] = "more_demos"
    for r in summary["rounds"][1:]:
        del r["fleet"]
        r["demos"], r["segments"] = {"episodes": 7, "successes": 7, "human_s": 36.4}, {}
    text = write_report(tmp_path, summary).read_text()
    assert text.count("| 7 demos |") == 3 and text.count("demonstrator 36.4") == 3


def test_final_test_figures_sit_beside_the_promotion_figures(tmp_path: Path, summary: dict[str, Any]) -> None:
    summary.update(final_test_episodes=200, final_test_seed=200_000)
    summary["rounds"][2]["final_test"] = _eval(171, 0.80, 0.89, episodes=200)
    text = write_report(tmp_path, summary).read_text()
    assert "seeds 200000…200199, disjoint from the promotion seeds" in text
    assert "| 62.0% [50.0%, 75.0%] | 85.5% [80.0%, 89.0%] |" in text  # round 2: promotion, then final test


def test_every_value_a_round_used_shows_its_reliability(tmp_path: Path, summary: dict[str, Any]) -> None:
    critic = {"voc": 0.81, "voc_episodes": 12, "pair_accuracy": {"1": 0.62, "8": 0.77}, "pairs": {"1": 900, "8": 700},
              "reference": "progress"}  # fmt: skip
    head = {"voc": None, "voc_episodes": 0, "pair_accuracy": {"1": None}, "pairs": {"1": 0}, "reference": "time"}
    summary["rounds"][2]["reliability"] = {"critic": critic, "habc viability": head}
    text = write_report(tmp_path, summary).read_text()
    assert "| 2 | critic | 0.81 over 12 | 1: 62.0% of 900, 8: 77.0% of 700 | progress |" in text
    assert "| 2 | habc viability | – | 1: – of 0 | time |" in text

    del summary["rounds"][2]["reliability"]
    assert "No value kept or weighed data in these rounds." in write_report(tmp_path, summary).read_text()


def test_a_recovery_gated_round_shows_its_gate(tmp_path: Path, summary: dict[str, Any]) -> None:
    assert "## The recovery gate" not in write_report(tmp_path, summary).read_text()
    held = {"episodes": 29, "failures": 35, "detected": 33, "recall": 0.9429, "alerts": 85, "true_alerts": 62,
            "precision": 0.7294, "latency_s_p50": -0.05, "latency_s_mean": -0.1}  # fmt: skip
    summary["rounds"][1]["recovery_gate"] = {"threshold": 0.55, "fit_rows": 5827, "fit_needs_correction": 3003,
                                             "threshold_choice": held}  # fmt: skip
    text = write_report(tmp_path, summary).read_text()
    assert "| 1 | 3003 of 5827 | 0.55 | 35 in 29 | 94.3% | 72.9% | -0.05 s |" in text


def test_the_method_comparison_plot_draws_every_method_and_gaps(tmp_path: Path) -> None:
    from vla_recover.loop.plots import draw_methods_per_round

    curves = {"habc": [0.25, 0.5, 0.6, 0.7], "more_demos": [0.25, 0.4, None, 0.55], "dagger_oracle": [0.25, 0.8]}
    path = draw_methods_per_round(curves, tmp_path / "plots" / "methods.png", "LiftCube, seed 0")
    assert path.read_bytes().startswith(PNG_SIGNATURE) and path.stat().st_size > 10_000


def test_each_test_is_split_by_the_injected_failures_that_fired(tmp_path: Path, summary: dict[str, Any]) -> None:
    def fired(outcomes: list[int], kinds: list[str]) -> dict[str, Any]:
        return {"outcomes": outcomes, "failures_fired": kinds}

    summary["rounds"][0]["eval"].update(fired([0, 0, 1, 0], ["push", "push", "", "slip"]))
    summary["rounds"][2]["eval"].update(fired([1, 0, 1, 1], ["push", "push+slip", "", "slip"]))
    summary["baseline"]["test"].update(fired([0, 1, 1, 1], ["push", "push", "", "slip"]))
    text = write_report(tmp_path, summary).read_text()
    assert "| policy | push: successes | slip: successes | push+slip: successes | none: successes |" in text
    assert "| `base` | 0/2 (0%) | 0/1 (0%) | – | 1/1 (100%) |" in text
    assert "| `round_2` | 1/1 (100%) | 1/1 (100%) | 0/1 (0%) | 1/1 (100%) |" in text
    assert "| `more_demos` (70 demonstrations) | 1/2 (50%) | 1/1 (100%) | – | 1/1 (100%) |" in text
    assert "`round_1`" not in text.split("## Where the failures were")[1].split("##")[0]  # kept no outcomes
