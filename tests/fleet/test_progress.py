"""Progress the fleet watches: ground truth or a critic's ratings, the floor operator's critic detector, and
in-distribution rewind targets chosen by the critic."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from teleop.operators import SimFloorOperator
from tests.fleet.test_fleet import fleet_config, tick_until
from vla_recover.config import ConfigError
from vla_recover.critic.model import CriticConfig, ProgressCritic, ProgressNet
from vla_recover.curves import last_in_distribution, smoothed
from vla_recover.data import EpisodeStore
from vla_recover.fleet import FleetConfig, build_fleet
from vla_recover.fleet.config import FloorOperatorConfig
from vla_recover.policies.common.encoders import SentenceEmbedder
from vla_recover.teleop.devices import ScriptedDevice


def small_critic(directory: Path, language: bool = False, image: bool = False, done_logit: float | None = None) -> Path:
    """A small untrained critic; ``done_logit``: with a done head that answers that logit for every step."""
    image_key = "obs.images.front" if image else None
    config = CriticConfig(
        use_language=language, hidden=16, layers=1, image_key=image_key, done_head=done_logit is not None
    )
    shapes: dict[str, tuple[int, ...]] = {"obs.state": (19,)}
    if image:
        shapes["obs.images.front"] = (32, 32, 3)
    net = ProgressNet(config, shapes)
    if net.done_head is not None:
        torch.nn.init.zeros_(net.done_head.weight)
        torch.nn.init.constant_(net.done_head.bias, float(done_logit or 0.0))
    net.normalizer.fit("obs.state", np.random.default_rng(0).normal(size=(64, 19)))
    cache = {"lift the red cube": np.ones(384, np.float32) / 20, "pick up the cube": -np.ones(384, np.float32) / 20}
    return ProgressCritic(net, SentenceEmbedder(cache), shapes).save(directory)


def test_smoothing_and_the_last_in_distribution_step() -> None:
    np.testing.assert_allclose(smoothed([0.0, 1.0, 2.0, 3.0], 2), [0.0, 0.5, 1.5, 2.5])
    # centred, for a curve recorded whole: the ends repeat the first and last values
    np.testing.assert_allclose(smoothed([0.0, 3.0, 6.0, 3.0], 3, causal=False), [1.0, 3.0, 4.0, 4.0])
    assert smoothed([], 3, causal=False).size == 0
    assert last_in_distribution([0.1, 0.3, 0.5, 0.4, 0.2]) == 2
    assert last_in_distribution([0.1, 0.3, 0.5, 0.49, 0.2], tolerance=0.02) == 3
    assert last_in_distribution([0.1, 0.3, 0.9, 0.3, 0.31], smooth_steps=1) == 2
    assert last_in_distribution([]) == 0


def test_the_critic_detector_sees_a_fall_and_a_stall_but_not_steady_progress() -> None:
    operator = SimFloorOperator(FloorOperatorConfig(detector="critic", stall_steps=10, critic_smooth_steps=3))

    def sees(ratings: list[float]) -> bool:
        slot = SimpleNamespace(branch_critic=ratings, branch_progress=[], info={})
        return operator._failing(SimpleNamespace(failure_progress_drop=0.15), slot)

    rising = list(np.linspace(0.0, 0.6, 40))
    assert not sees(rising) and not sees([])
    assert sees(rising + [0.5, 0.4, 0.3, 0.3])  # fell 0.15 below its best
    assert sees(rising[:20] + [rising[19]] * 15)  # flat for longer than stall_steps
    assert not sees(rising + [0.55, 0.6, 0.61])  # a small dip is not a failure


def test_per_step_instructions_give_the_same_ratings_as_one_at_a_time(tmp_path: Path) -> None:
    critic = ProgressCritic.load(small_critic(tmp_path / "critic", language=True))
    states = np.random.default_rng(1).normal(size=(4, 19)).astype(np.float32)
    words = ["lift the red cube", "pick up the cube", "pick up the cube", "lift the red cube"]
    together = critic.predict({"obs.state": states}, words)
    alone = [critic.predict({"obs.state": states[i : i + 1]}, words[i])[0] for i in range(4)]
    np.testing.assert_allclose(together, alone, rtol=1e-5)
    with pytest.raises(ValueError, match="3 instructions for 4 steps"):
        critic.predict({"obs.state": states}, words[:3])


def test_the_fleet_rates_every_step_and_rewinds_to_where_the_critic_rated_it_best(tmp_path: Path) -> None:
    critic_dir = small_critic(tmp_path / "critic")
    fleet = build_fleet(fleet_config(tmp_path, robots=2, episodes=2, critic=str(critic_dir), run_ahead_steps=3))
    fleet.start()
    slot = fleet.slots["sim00"]
    tick_until(fleet, lambda: len(slot.branch_rows) >= 15)
    assert len(slot.branch_critic) == len(slot.branch_rows)  # every step landed is rated in the same tick
    assert slot.attempt is not None
    rows = [slot.attempt.rows[i] for i in slot.branch_rows]
    expected = ProgressCritic.load(critic_dir).predict({"obs.state": np.stack([r["obs.state"] for r in rows])}, "")
    np.testing.assert_allclose(slot.branch_critic, expected, rtol=1e-5)

    lease = fleet.grant_takeover("sim00", "alice", ScriptedDevice([None] * 50))
    fleet._drain(slot)
    fleet._rate_new_steps()
    here = len(slot.branch_rows)
    slot.branch_critic[:] = list(np.linspace(0.1, 0.8, here))
    slot.branch_critic[here - 6 :] = [0.3] * 6  # the critic saw it go wrong six steps ago
    assert fleet.rewind("sim00", lease.token) == 6
    assert len(slot.branch_critic) == len(slot.branch_rows) == here - 6
    fleet.close()


def test_critic_settings_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"floor_operator\.detector: 'critic' needs critic"):
        fleet_config(tmp_path, floor_operator={"enabled": True, "detector": "critic"})
    critic_dir = small_critic(tmp_path / "image_critic", image=True)
    with pytest.raises(ValueError, match=r"reads obs\.images\.front, but the fleet records only obs\.state"):
        build_fleet(fleet_config(tmp_path, critic=str(critic_dir)))


def test_a_critic_run_stores_its_episodes(tmp_path: Path) -> None:
    config = fleet_config(tmp_path, robots=2, episodes=3, critic=str(small_critic(tmp_path / "c")),
                          floor_operator={"enabled": True, "detector": "critic", "stall_steps": 10},
                          teleoperator={"enabled": True, "reaction_s": 0.0, "max_steps": 5})  # fmt: skip
    assert isinstance(config, FleetConfig)
    summary = build_fleet(config).run()
    assert summary["episodes"] == 3
    with EpisodeStore(tmp_path / "store") as store:
        assert len(store.episodes()) == 3
        assert any(e.kind == "takeover_requested" for e in store.events())  # a random critic's curve stalls


def test_an_arms_episode_ends_a_success_when_the_critics_done_head_says_so(tmp_path: Path) -> None:
    done = small_critic(tmp_path / "done", done_logit=6.0)  # P(done) 0.998 on every step
    robots = [{"kind": "sim"}, {"kind": "fake", "name": "arm"}]
    config = fleet_config(tmp_path / "run", robots=robots, episodes=2, critic=str(done), critic_done_threshold=0.9,
                          task_config={"horizon": 20})  # fmt: skip
    summary = build_fleet(config).run()
    with EpisodeStore(tmp_path / "run" / "store") as store:
        outcomes = {e.robot: (e.outcome, e.length) for e in store.episodes()}
        detected = [e.payload["p_done"] for e in store.events(robot="arm", kind="outcome_detected")]
    assert outcomes == {"arm": ("success", 1), "sim00": ("truncated", 20)}  # a sim has its own success detector
    assert detected == [pytest.approx(0.9975, abs=1e-3)] and summary["successes"] == 1

    never = small_critic(tmp_path / "never", done_logit=-6.0)
    config = fleet_config(tmp_path / "run2", robots=[{"kind": "fake", "name": "arm"}], episodes=1, critic=str(never),
                          critic_done_threshold=0.9, task_config={"horizon": 20})  # fmt: skip
    build_fleet(config).run()
    with EpisodeStore(tmp_path / "run2" / "store") as store:
        assert [(e.outcome, e.length) for e in store.episodes()] == [("truncated", 20)]  # a person labels it


def test_a_done_threshold_needs_a_critic_with_a_done_head(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="critic_done_threshold: needs critic"):
        fleet_config(tmp_path, critic_done_threshold=0.9)
    plain = small_critic(tmp_path / "plain")
    with pytest.raises(ValueError, match=r"critic_done_threshold: the critic at .* has no done head"):
        build_fleet(fleet_config(tmp_path, critic=str(plain), critic_done_threshold=0.9))
