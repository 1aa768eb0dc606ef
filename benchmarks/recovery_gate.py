"""The recovery gate as a floor operator's detector, beside the critic's, on held-out fleet episodes.

    python benchmarks/recovery_gate.py [--config configs/loop/quickstart.yaml] [--work runs/bench_gate]
                                       [--fit-episodes 120] [--held-out-episodes 60]

One base policy (a loop run with no rounds, in ``<work>/base``) runs two fleets with the loop's fleet settings:
one on the fleet seeds of the loop's first rounds, whose episodes (with the base demonstrations) train the critic
and the gate, and one on seeds no round uses, which only judges them. Each detector's verdicts are computed along
every held-out episode's branches as the floor operator would have seen them, and scored against the failures the
fleet recorded: a failure the scripted expert could still recover from is one that needs correction
(``vla_recover.recovery``). Finished steps are read back. Prints one JSON object on its last line."""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from vla_recover.config import load_yaml, validate_config
from vla_recover.curves import fell, stalled
from vla_recover.data import EpisodeStore
from vla_recover.loop.config import QUICKSTART, LoopConfig
from vla_recover.loop.reporters import LineReporter
from vla_recover.loop.runner import LoopRun
from vla_recover.recovery import RecoveryGate, branch_alerts, score_detector, train_gate

HELD_OUT_SEED = 50_000  # past every round's fleet seeds and before the evaluation's


def _timed(label: str, started: float) -> None:
    print(f"[gate] {label} {time.perf_counter() - started:.0f}s", flush=True)


def _fleet(config: LoopConfig, store: Path, policy: Path, seed: int, episodes: int, **fields: Any) -> dict[str, Any]:
    """A fleet run of ``policy`` on ``episodes`` seeds from ``seed`` into ``store`` (read back once done)."""
    from vla_recover.fleet import build_fleet

    done = store / "fleet_done.json"
    if done.is_file():
        return dict(json.loads(done.read_text()))
    fleet_config = config.fleet_config(store, policy, 1, {}, fields.pop("critic", None))
    floor = fleet_config.floor_operator.model_copy(update=fields.pop("floor_operator", {}))
    fleet_config = fleet_config.model_copy(
        update={"seed": seed, "episodes": episodes, "operator_budget_s": None, "floor_operator": floor, **fields}
    )
    summary = build_fleet(fleet_config).run()
    done.write_text(json.dumps(summary, default=str))
    return summary


def _response(summary: dict[str, Any]) -> dict[str, Any]:
    """What a floor operator's detector changes: how soon and how often failures got a takeover in time."""
    response = summary["failure_response"]
    keys = ("failures", "taken_over", "onset_to_request_s_p50", "onset_to_grant_s_p50", "rescued_in_time_share")
    return {"successes": summary["successes"], "episodes": summary["episodes"], **{k: response[k] for k in keys}}


def _critic_verdicts(config: LoopConfig, critic_dir: Path, store: EpisodeStore) -> np.ndarray:
    """The floor operator's critic detector at every policy row: its rating fell or stalled along the branch."""
    from vla_recover.critic.model import ProgressCritic

    critic = ProgressCritic.load(critic_dir)
    floor = config.fleet_config(store.path, store.path, 1, {}).floor_operator
    actor = store.read("actor")
    verdicts = np.zeros(store.n_steps, dtype=bool)

    def troubled(ratings: list[float]) -> bool:
        smooth = floor.critic_smooth_steps
        return fell(ratings, floor.critic_drop, smooth) or stalled(
            ratings, floor.stall_steps, floor.critic_stall_gain, smooth
        )

    for row in store.episodes():
        span = slice(row.start, row.stop)
        steps = {key: store.read(key, row.start, row.stop) for key in critic.input_keys}
        ratings = critic.predict(steps, row.instruction)
        verdicts[span] = branch_alerts(ratings, actor[span], troubled)
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=None, help="loop config; default: the embedded quickstart")
    parser.add_argument("--work", type=Path, default=Path("runs/bench_gate"))
    parser.add_argument(
        "--base", type=Path, default=None, help="a loop run folder whose base policy to use; default: train one"
    )
    parser.add_argument("--fit-episodes", type=int, default=120, help="fleet episodes the critic and gate learn on")
    parser.add_argument("--held-out-episodes", type=int, default=60, help="fleet episodes that judge them")
    args = parser.parse_args()
    started = time.perf_counter()
    raw: dict[str, Any] = dict(load_yaml(args.config) or {}) if args.config else dict(QUICKSTART)
    work = args.work
    base_dir = args.base or work / "base"
    base = validate_config(LoopConfig, {**raw, "name": "base", "out": base_dir, "rounds": 0})
    if args.base is None:
        LoopRun(base, LineReporter("gate/base")).run()
    policy = base_dir / "policies" / "base" / "policy"
    fit_store = work / "fit_store"
    if not (fit_store / "fleet_done.json").is_file():
        shutil.rmtree(fit_store, ignore_errors=True)
        shutil.copytree(base_dir / "store", fit_store)  # the demonstrations, as a loop's critic sees them
    _fleet(base, fit_store, policy, base.fleet_config(fit_store, policy, 1, {}).seed, args.fit_episodes)
    _timed("fit fleet", started)
    _fleet(base, work / "held_out_store", policy, HELD_OUT_SEED, args.held_out_episodes)
    _timed("held-out fleet", started)

    from vla_recover.config import validate_config as checked
    from vla_recover.critic.train import CriticTrainConfig, train_critic

    critic_dir = work / "critic"
    if not (critic_dir / "config.json").is_file():
        train_critic(fit_store, critic_dir, checked(CriticTrainConfig, base.critic, source="loop critic"))
    _timed("critic", started)
    gate_dir = work / "gate"
    if not (gate_dir / "gate.json").is_file():
        with EpisodeStore(fit_store) as store:
            train_gate(store).save(gate_dir)
    gate = RecoveryGate.load(gate_dir)
    _timed("gate", started)
    with EpisodeStore(work / "held_out_store") as held_out:
        gate_score = gate.score(held_out)
        critic_score = score_detector(held_out, _critic_verdicts(base, critic_dir, held_out), lead_s=gate.config.lead_s)
    # the same held-out seeds with each detector in charge of the floor operator (the critic picks rewind targets
    # in both, so only the detector differs)
    online = {}
    for detector, extra in (("critic", {}), ("gate", {"gate": gate_dir})):
        summary = _fleet(
            base, work / f"online_{detector}", policy, HELD_OUT_SEED + 10_000, args.held_out_episodes,
            critic=critic_dir, floor_operator={"detector": detector}, **extra,
        )  # fmt: skip
        online[detector] = _response(summary)
        _timed(f"fleet with the {detector} detector", started)
    figures = {
        "task": base.task,
        "fit_episodes": args.fit_episodes,
        "held_out_episodes": args.held_out_episodes,
        "gate": gate_score.as_json(),
        "gate_threshold": gate.threshold,
        "gate_fit": gate.metrics,
        "critic": critic_score.as_json(),
        "online": online,
        "goal_recall_0.8_at_precision_0.7": bool(
            (gate_score.recall or 0) >= 0.8 and (gate_score.precision or 0) >= 0.7
        ),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
