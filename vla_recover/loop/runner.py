"""The post-training loop: demos → base policy → K rounds of [fleet → critic → retrain → evaluate → promote or
discard] → report.

Every step is a pair of events in the run store's append-only log (``loop_step_started`` with an attempt id,
``loop_step_done`` with the step's result), so a crashed run resumes from its log: finished steps are read back, the
interrupted one starts over. Episodes an interrupted step managed to store stay in the store (nothing is deleted)
but belong to no finished step, so no training set includes them.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from vla_recover.data import EpisodeStore
from vla_recover.loop.beside import Beside, evaluate_on_seeds, train_policy
from vla_recover.loop.config import BASE_FIELDS, FIRST_ROUND_FIELDS, LoopConfig, saved_with_defaults
from vla_recover.loop.methods import LOOP_METHODS
from vla_recover.loop.promotion import decide
from vla_recover.loop.reporters import SilentReporter, StepReporter
from vla_recover.loop.summarize import operators_present_s, summarize

if TYPE_CHECKING:
    from vla_recover.policies.common.checkpoint import Checkpoint
    from vla_recover.train.trainer import TrainConfig

__all__ = ["LoopRun"]

STARTED, DONE = "loop_step_started", "loop_step_done"
PROMOTED, DISCARDED, SEEDED = "policy_promoted", "policy_discarded", "loop_seeded"
BASE_STEPS = ("demos", "base_train", "base_eval")
FIRST_ROUND_STEPS = ("round_1.fleet", "round_1.critic")  # what seed_first_round takes besides the base steps


class LoopRun:
    """One loop run. ``beside``: run the final tests and the baseline's fine-tune in a second process beside the
    rounds (``vla_recover.loop.beside``), which on 2 cores shortens a run by what they cost; off, everything runs in
    line, as a benchmark running several runs side by side wants."""

    def __init__(self, config: LoopConfig, reporter: StepReporter | None = None, beside: bool = False) -> None:
        self.config = config
        self.beside = beside
        self._beside: Beside | None = None
        self.dir = config.run_dir
        self.store_path = self.dir / "store"
        self.reporter = reporter or SilentReporter()
        self.results: dict[str, dict[str, Any]] = {}
        self.attempt = 0
        self.dir.mkdir(parents=True, exist_ok=True)
        if config.seed_from is not None and not self.store_path.exists():
            self._seed_from(config.seed_from)
        self._check_same_run()

    # -- the event log ----------------------------------------------------------------------------------------------
    def _log(self, kind: str, payload: dict[str, Any]) -> int:
        with EpisodeStore(self.store_path, mode="a") as store:
            return store.append_event(kind, "loop", payload)

    def _check_same_run(self) -> None:
        """A run folder belongs to one config: resuming with another would mix two experiments."""
        config_json = self.config.model_dump(mode="json")
        saved = self.dir / "config.json"
        if saved.is_file():
            # a field added since the run was saved, nested or not, reads as its default (the behaviour it ran with)
            before = saved_with_defaults(json.loads(saved.read_text()))
            if before != config_json:
                changed = sorted(k for k in set(before) | set(config_json) if before.get(k) != config_json.get(k))
                raise ValueError(
                    f"out: {self.dir} holds a loop run with a different config (fields {changed} differ); "
                    "choose another name/out or delete the folder to start over"
                )
        else:
            saved.write_text(json.dumps(config_json, indent=1))
        if (self.store_path / "index.sqlite").is_file():
            with EpisodeStore(self.store_path) as store:
                for event in store.events():
                    if event.kind == DONE:
                        self.results[event.payload["step"]] = event.payload["result"]
                    elif event.kind == SEEDED:  # only the seeded steps carry over from the run this one started from
                        carried = event.payload.get("steps", BASE_STEPS)
                        self.results = {k: v for k, v in self.results.items() if k in carried}

    def _seed_from(self, source: Path) -> None:
        saved = source / "config.json"
        if not saved.is_file() or not (source / "store" / "index.sqlite").is_file():
            raise FileNotFoundError(f"seed_from: {source} is not a loop run folder (no config.json or store)")
        theirs, ours = saved_with_defaults(json.loads(saved.read_text())), self.config.model_dump(mode="json")
        differ = [k for k in BASE_FIELDS if theirs.get(k) != ours.get(k)]
        if differ:
            raise ValueError(f"seed_from: {source} was run with different {differ}; its base policy does not apply")
        steps: tuple[str, ...] = BASE_STEPS
        if self.config.seed_first_round:
            self._check_first_round_source(source, theirs, ours)
            steps += FIRST_ROUND_STEPS
        with EpisodeStore(source / "store") as store:
            finished = {e.payload["step"] for e in store.events(kind=DONE)}
        missing = [step for step in steps if step not in finished]
        if missing:
            raise ValueError(f"seed_from: {source} has not finished {missing}; run it first")
        if "base_final_test" in finished and theirs.get("final_test") == ours["final_test"]:
            steps += ("base_final_test",)
        shutil.copytree(source / "store", self.store_path)
        if self.config.seed_first_round:  # round 2's floor operator may watch it
            shutil.copytree(source / "critics" / "round_1", self._critic_dir(1), dirs_exist_ok=True)
        self._log(SEEDED, {"from": str(source), "steps": list(steps)})

    @staticmethod
    def _check_first_round_source(source: Path, theirs: dict[str, Any], ours: dict[str, Any]) -> None:
        differ = [k for k in FIRST_ROUND_FIELDS if theirs.get(k) != ours.get(k)]
        if differ:
            raise ValueError(f"seed_first_round: {source} was run with different {differ}; its round 1 does not apply")
        # a later round's critic relabels the store, and guided rollouts belong to their guided method alone
        method = str(theirs.get("method"))
        if theirs.get("rounds") != 1 or method not in LOOP_METHODS or LOOP_METHODS.get(method).guided:
            raise ValueError(
                f"seed_first_round: {source} ran {theirs.get('rounds')} rounds of {theirs.get('method')}; "
                "it must be a one-round run of a method whose fleet runs the plain policy"
            )

    def step(self, name: str, work: Callable[[], dict[str, Any]], total: int | None = None) -> dict[str, Any]:
        """Run ``work()`` unless the log says ``name`` finished; either way return its result.

        ``self.attempt`` is the id of this try's start event while ``work`` runs: what it stores is tagged with it.
        """
        if name in self.results:
            self.reporter.end(name, self.results[name], reused=True)
            return self.results[name]
        self.attempt = self._log(STARTED, {"step": name})
        attempt = self.attempt
        self.reporter.begin(name, total)
        started = time.perf_counter()
        result = work()
        result["wall_s"] = round(time.perf_counter() - started, 2)
        self._log(DONE, {"step": name, "attempt": attempt, "result": result})
        self.results[name] = result
        self.reporter.end(name, result, reused=False)
        return result

    # -- the loop ---------------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        with contextlib.ExitStack() as stack:
            self._beside = stack.enter_context(Beside()) if self.beside else None
            try:
                return self._run()
            finally:
                self._beside = None

    def _run(self) -> dict[str, Any]:
        cfg = self.config
        demos = self.step("demos", self._collect_demos, total=cfg.demos.episodes + cfg.demos.starts)
        demo_ids = demos["episode_ids"]
        base = self.step(
            "base_train", partial(self._train, self._train_config("base", demo_ids, None)), total=self._steps(False)
        )
        current, current_eval = (
            base["policy"],
            self.step("base_eval", partial(self._evaluate, base["policy"]), total=cfg.evaluation.episodes),
        )
        self._final_test_beside("base_final_test", base["policy"])
        gathered: list[dict[str, Any]] = []  # each round's new episodes: a fleet's, or demonstrations
        for r in range(1, cfg.rounds + 1):
            prefix = f"round_{r}"
            if cfg.loop_method.rounds_collect == "demos":
                gathered.append(self.step(f"{prefix}.demos", partial(self._more_demos, r)))
            elif cfg.loop_method.rounds_collect == "oracle":
                gathered.append(self.step(f"{prefix}.oracle", partial(self._oracle, r, current)))
            else:
                fleet = self.step(f"{prefix}.fleet", partial(self._fleet, r, current), total=self._episodes())
                gathered.append(fleet)
                self.step(f"{prefix}.critic", partial(self._critic, r, fleet["episode_ids"]), total=self._critic_steps)
                # the rounds' human time is known from here; the critic has read the store, so the bought
                # demonstrations it now receives touch nothing the rounds learn
                if r == cfg.rounds and self._beside is not None:
                    self._baseline_beside(base["policy"], demo_ids)
            ids, init, share = self._training_set(demo_ids, gathered, current)
            trained = self.step(
                f"{prefix}.train",
                partial(self._train, self._train_config(prefix, ids, init, share)),
                total=self._steps(init is not None),
            )
            self._final_test_beside(f"{prefix}.final_test", trained["policy"])
            candidate = self.step(
                f"{prefix}.eval", partial(self._evaluate, trained["policy"]), total=cfg.evaluation.episodes
            )
            decision = self.step(
                f"{prefix}.decide", partial(self._decide, prefix, trained["policy"], candidate, current_eval)
            )
            if decision["promote"]:
                current, current_eval = trained["policy"], candidate
        if cfg.final_test.episodes:  # after every decision: no choice ever reads these seeds
            self.step("base_final_test", partial(self._final_test, "base_final_test", base["policy"]))
            for r in range(1, cfg.rounds + 1):
                name, policy = f"round_{r}.final_test", str(self.dir / "policies" / f"round_{r}" / "policy")
                self.step(name, partial(self._final_test, name, policy), total=cfg.final_test.episodes)
        self._baseline(base["policy"], demo_ids)
        summary = self.summary()
        self.step("report", partial(self._report, summary))
        return summary

    def _beside_or(self, name: str, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Step ``name``'s result from the process beside the rounds where it ran there, else ``work()`` in line."""
        taken = self._beside.take(name) if self._beside is not None else None
        return work() if taken is None else taken

    def _final_test_beside(self, name: str, policy: str) -> None:
        """Start step ``name`` (a final test) in the process beside the rounds, if there is one."""
        if self._beside is not None and self.config.final_test.episodes and name not in self.results:
            self._beside.submit(name, evaluate_on_seeds, policy, *self._evaluation_args(self._final_test_seeds()))

    def _final_test(self, name: str, policy: str) -> dict[str, Any]:
        return self._beside_or(name, partial(self._evaluate, policy, seeds=self._final_test_seeds()))

    def _baseline_demos(self, demo_ids: list[int]) -> list[int] | None:
        """The baseline's training set: the base's demonstrations and those the rounds' human time buys (the step
        ``baseline.demos``); None where the run has no baseline."""
        cfg = self.config
        human_s = operators_present_s(self.results, cfg.rounds)  # what the fleet rounds cost
        if cfg.baseline == "none" or cfg.loop_method.rounds_collect != "fleet" or not human_s:
            return None
        seed = cfg.fleet_config(self.store_path, self.dir, 1, {}).seed  # bought from round 1's fleet seeds on
        conditions = LOOP_METHODS.get(cfg.baseline).demo_conditions
        demos = self.step("baseline.demos", partial(self._buy_demos, seed, human_s, conditions))
        return demo_ids + demos["episode_ids"]

    def _baseline_seeds(self) -> list[int]:
        return self._final_test_seeds() if self.config.final_test.episodes else self._promotion_seeds()

    def _baseline_beside(self, base_policy: str, demo_ids: list[int]) -> None:
        ids = self._baseline_demos(demo_ids)
        if ids is None or self._beside is None or "baseline.train" in self.results:
            return
        config = self._train_config("baseline", ids, base_policy, None, self.config.baseline)
        self._beside.submit("baseline.train", train_policy, config)
        # the worker runs its jobs in order: the test finds the policy the fine-tune saved
        policy = str(config.out / "policy")
        self._beside.submit("baseline.test", evaluate_on_seeds, policy, *self._evaluation_args(self._baseline_seeds()))

    def _baseline(self, base_policy: str, demo_ids: list[int]) -> None:
        """What the rounds' human time would have bought as demonstrations: fine-tuned into the base in one round
        with the same recipe, tested on the final-test seeds (the promotion seeds when there is no final test)."""
        ids = self._baseline_demos(demo_ids)
        if ids is None:
            return
        config = self._train_config("baseline", ids, base_policy, None, self.config.baseline)
        train = partial(self._beside_or, "baseline.train", partial(self._train, config))
        trained = self.step("baseline.train", train, total=self._steps(True))
        seeds = self._baseline_seeds()
        test = partial(self._beside_or, "baseline.test", partial(self._evaluate, trained["policy"], seeds=seeds))
        self.step("baseline.test", test, total=len(seeds))

    def _steps(self, retrain: bool) -> int:
        return self.config.train_config(self.store_path, self.dir, retrain).steps

    def _episodes(self) -> int:
        return self.config.fleet_config(self.store_path, self.dir, 0, {}).episodes

    # -- steps ------------------------------------------------------------------------------------------------------
    def _collect_demos(self) -> dict[str, Any]:
        from vla_recover.rollout import CollectConfig, collect_demos

        cfg = self.config
        collect = CollectConfig(
            task=cfg.task,
            episodes=cfg.demos.episodes,
            seed=cfg.demos.seed,
            expert=cfg.demos.expert,
            task_config=cfg.demo_task_config(cfg.demos.conditions),
            out=self.store_path,
            workers=cfg.demos.workers,
        )
        ids, _ = collect_demos(collect, lambda done, _: self.reporter.advance(done))
        recorded = set(ids)
        with EpisodeStore(self.store_path) as store:
            successes = sum(row.outcome == "success" for row in store.episodes() if row.id in recorded)
        if not cfg.demos.starts:
            return {"episode_ids": sorted(ids), "successes": successes}
        starts = collect.model_copy(
            update={
                "episodes": cfg.demos.starts,
                "seed": cfg.demos.starts_seed,
                "task_config": {**collect.task_config, "horizon": 2},
            }
        )
        start_ids, _ = collect_demos(starts, lambda done, _: self.reporter.advance(cfg.demos.episodes + done))
        return {"episode_ids": sorted(ids + start_ids), "successes": successes, "starts": len(start_ids)}

    def _train_config(
        self,
        name: str,
        episode_ids: list[int],
        init_from: str | None,
        demo_share: float | None = None,
        method: str | None = None,
    ) -> TrainConfig:
        """Policy ``name``'s training on ``episode_ids`` with the data rule of ``method`` (default: the run's)."""
        retrain = init_from is not None  # fine-tuning's recipe; a policy trained from scratch gets the base's
        rule: dict[str, Any] = {}
        if name != "base":
            rule["weighting"] = self.config.dataset_config(demo_share, method)
            rule["policy_config"] = self.config.round_policy_config(retrain, method)
        return self.config.train_config(
            self.store_path, self.dir / "policies" / name, retrain=retrain, select={"episodes": tuple(episode_ids)},
            init_from=init_from, **rule,
        )  # fmt: skip

    def _train(self, config: TrainConfig) -> dict[str, Any]:
        return train_policy(config, lambda step, loss: self.reporter.advance(step, f"loss {loss:.4f}"))

    def _final_test_seeds(self) -> list[int]:
        final = self.config.final_test
        return list(range(final.seed, final.seed + final.episodes))

    def _promotion_seeds(self) -> list[int]:
        cfg = self.config.evaluation
        return list(range(cfg.seed, cfg.seed + cfg.episodes))

    def _evaluation_args(self, seeds: list[int]) -> tuple[str, Any, list[int], int, float, str]:
        """evaluate_on_seeds' arguments after the policy."""
        # the fleet's action tolerance: evaluation runs the policy as the fleet does
        # and on the fleet's device: the policy is judged as the fleet runs it
        fleet = self.config.fleet_config(self.store_path, self.dir, 0, {})
        evaluation = self.config.evaluation.batch, fleet.policy_action_tolerance, fleet.device
        return self.config.task, self.config.task_config, seeds, *evaluation

    def _evaluate(self, policy_dir: str, seeds: list[int] | None = None) -> dict[str, Any]:
        """Success on ``seeds``; by default the promotion seeds."""
        from vla_recover.evaluate import running_totals

        count = running_totals(lambda done, successes: self.reporter.advance(done, f"{successes} successes"))
        args = self._evaluation_args(seeds if seeds is not None else self._promotion_seeds())
        return evaluate_on_seeds(policy_dir, *args, on_batch=count)

    def _fleet(self, round_index: int, policy_dir: str) -> dict[str, Any]:
        from vla_recover.fleet import build_fleet
        from vla_recover.policies.common.checkpoint import Checkpoint

        attempt = self.attempt
        tags = {"loop_round": round_index, "loop_attempt": attempt}
        critic = None
        if self.config.fleet_critic == "previous_round" and round_index > 1:
            critic = self._critic_dir(round_index - 1)
        checkpoint = Checkpoint.open(policy_dir)
        fleet_config = self.config.fleet_config(self.store_path, checkpoint.path, round_index, tags, critic)
        guided = self.config.loop_method.guided
        source = self._guided_source(round_index, checkpoint, fleet_config.device) if guided else None
        manager = build_fleet(fleet_config, source)

        def on_tick(fleet: Any) -> None:
            if fleet.ticks % 20 == 0:
                self.reporter.advance(fleet.ledger.summary()["episodes"])

        summary = manager.run(on_tick)
        with EpisodeStore(self.store_path) as store:
            ids = sorted(row.id for row in store.episodes() if row.info.get("loop_attempt") == attempt)
        summary["episode_ids"] = ids
        if source is not None:
            summary["guided"] = {
                "chunks": source.chunks,
                "guided_chunks": source.guided_chunks,
                "episodes": summary["episodes"],
                "successes": summary["successes"],
            }
        return summary

    def _more_demos(self, round_index: int) -> dict[str, Any]:
        """Demonstrations bought with the round's human time, from the seeds the round's fleet would have started
        at."""
        cfg = self.config
        seed = cfg.fleet_config(self.store_path, self.dir, round_index, {}).seed
        return self._buy_demos(seed, cfg.more_demos.human_s_per_round, cfg.loop_method.demo_conditions)

    def _buy_demos(self, seed: int, human_s: float, conditions: Literal["nominal", "task"]) -> dict[str, Any]:
        from vla_recover.loop.demos import buy_demonstrations

        return buy_demonstrations(self.config, self.store_path, seed, human_s, conditions, self.reporter.advance)

    def _oracle(self, round_index: int, policy_dir: str) -> dict[str, Any]:
        from vla_recover.loop.oracle import oracle_round

        cfg = self.config
        fleet = cfg.fleet_config(self.store_path, Path(policy_dir), round_index, {})
        episodes = cfg.oracle.episodes or fleet.episodes
        return oracle_round(
            Path(policy_dir), cfg.task, cfg.task_config, list(range(fleet.seed, fleet.seed + episodes)),
            cfg.oracle.expert, self.store_path, cfg.evaluation.batch, fleet.policy_action_tolerance,
            {"loop_round": round_index, "loop_attempt": self.attempt}, fleet.device,
        )  # fmt: skip

    def _guided_source(self, round_index: int, checkpoint: Checkpoint, device: str) -> Any:
        """ReGuide for this round: dynamics and phase targets from every finished step's data so far."""
        from vla_recover.config import validate_config
        from vla_recover.fleet.guided import GuidedChunks
        from vla_recover.train.reguide import ReGuideConfig, build_reguide

        config = validate_config(ReGuideConfig, self.config.reguide.guidance, source="loop reguide.guidance")
        ids = list(self.results["demos"]["episode_ids"])
        for r in range(1, round_index):
            ids += self.results[f"round_{r}.fleet"]["episode_ids"]
        policy, embedder = checkpoint.load()  # loaded once: ReGuide is built on it and the fleet runs it
        with EpisodeStore(self.store_path) as store:
            reguide = build_reguide(store, policy, config, episode_ids=ids)
        directory = reguide.save(self.dir / "reguide" / f"round_{round_index}")
        return GuidedChunks(checkpoint, directory, loaded=(policy, embedder), device=device)

    def _critic_dir(self, round_index: int) -> Path:
        return self.dir / "critics" / f"round_{round_index}"

    @cached_property
    def _critic_steps(self) -> int | None:
        """The critic's training steps, for the progress bar (a registered critic may train otherwise)."""
        from vla_recover.critic.kinds import critic_train_config

        return getattr(critic_train_config(self.config.critic, source="loop critic")[1], "steps", None)

    def _critic(self, round_index: int, episode_ids: list[int]) -> dict[str, Any]:
        from vla_recover.critic.kinds import fit_critic
        from vla_recover.critic.label import label_store
        from vla_recover.train.reliability import curve_reliability

        critic_dir = self._critic_dir(round_index)
        metrics = fit_critic(self.store_path, critic_dir, self.config.critic, lambda s, _: self.reporter.advance(s))
        curves: dict[int, tuple[Any, Any]] = {}  # episode id: (its timeline rows, the critic's progress on them)
        label_store(self.store_path, critic_dir, self.config.segmenter, curves=curves)
        steps: dict[str, int] = {}
        wanted = set(episode_ids)
        with EpisodeStore(self.store_path) as store:
            for segment in store.segments(source="critic"):
                if segment.episode in wanted:
                    steps[segment.kind] = steps.get(segment.kind, 0) + segment.stop - segment.start
            reliability = curve_reliability(store, curves, episode_ids)
        held_out = metrics.get("held_out", {})
        return {
            "critic": str(critic_dir),
            "segments": steps,
            "held_out_voc": held_out.get("voc"),
            "reliability": reliability,
        }

    def _training_set(
        self, demo_ids: list[int], fleet_rounds: list[dict[str, Any]], current: str
    ) -> tuple[list[int], str | None, float | None]:
        """(episode ids, checkpoint to start from or None, demonstrations' share of the weight or None)."""
        cfg, method = self.config, self.config.loop_method
        rollouts = [i for fleet in fleet_rounds for i in fleet["episode_ids"]]
        if not method.guided:
            fine_tune = method.start == "config" and cfg.retrain_from == "current"
            return demo_ids + rollouts, (current if fine_tune else None), None
        with EpisodeStore(self.store_path) as store:  # ReGuide absorbs only the successful guided rollouts
            succeeded = {row.id for row in store.episodes() if row.outcome == "success"}
        kept = [i for i in rollouts if i in succeeded]
        if method.start == "scratch":
            return demo_ids + kept, None, None
        return demo_ids + kept, current, cfg.reguide.demo_share

    def _decide(self, name: str, policy: str, candidate: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
        decision = decide(candidate, current, self.config.promotion)
        self._log(PROMOTED if decision.promote else DISCARDED, {"round": name, "policy": policy, **decision.as_json()})
        return decision.as_json()

    def _report(self, summary: dict[str, Any]) -> dict[str, Any]:
        from vla_recover.loop.report import write_report

        (self.dir / "summary.json").write_text(json.dumps(summary, indent=1))
        return {"report": str(write_report(self.dir, summary))}

    # -- the summary ------------------------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        return summarize(self.config, self.results)
