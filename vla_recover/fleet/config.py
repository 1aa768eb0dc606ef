"""``vla-recover fleet``: how many robots, doing what, under which (simulated) operators."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from vla_recover.config import FrozenConfig
from vla_recover.devices import DEVICE_HELP, DeviceName
from vla_recover.envs import checked_task, resolve_task_name
from vla_recover.fleet.robots import RobotKindConfig, SimRobotsConfig, robot_configs, slot_names

__all__ = ["FleetConfig", "FloorOperatorConfig", "RemoteInferenceConfig", "TeleoperatorConfig"]


class FloorOperatorConfig(FrozenConfig):
    """The simulated floor operators: watch every robot, ask for takeovers, reset finished robots.

    A floor operator at the console sees every robot; one that is resetting a robot (``resets: physical``) is at
    that robot, away from the console, and sees nothing until the reset is done. A free operator asks for a takeover
    of the robot it saw failing first, once its reaction time has passed, then resets finished robots.
    """

    enabled: bool = Field(
        default=True, description="simulate floor operators; false: none watches, finished robots reset themselves"
    )
    count: int = Field(default=1, ge=1, le=64, description="floor operators watching the fleet")
    resets: Literal["physical", "automatic"] = Field(
        default="physical",
        description="physical: a floor operator resets each finished robot, taking reset_s of its time (away from "
        "the console) and the robot's; automatic: the sim resets itself at once, no operator time",
    )
    detector: Literal[
        "ground_truth", "stall", "both", "critic", "critic_or_ground_truth", "gate", "gate_or_ground_truth"
    ] = Field(
        default="both",
        description="ground_truth: an injected failure or progress falling; stall: no progress gain; both; critic: "
        "the fleet's critic (FleetConfig.critic) rating the robot's progress falling, or stalling; "
        "critic_or_ground_truth: the critic's alerts and what a person watching sees (ground truth); gate: the "
        "fleet's recovery gate (FleetConfig.gate) judging from the robot's state that it needs correction; "
        "gate_or_ground_truth: the gate's alerts and what a person watching sees",
    )
    reaction_s: float = Field(default=1.0, ge=0.0, description="from a failure to the takeover request")
    request_cost_s: float = Field(default=2.0, ge=0.0, description="operator time per takeover request")
    reset_s: float = Field(default=8.0, ge=0.0, description="operator (and robot) time per reset")
    stall_steps: int = Field(default=60, ge=1, description="no progress gain for this many steps counts as a stall")
    critic_drop: float = Field(
        default=0.15, gt=0.0, le=1.0, description="critic detector: smoothed rating this far below its best so far"
    )
    critic_smooth_steps: int = Field(default=5, ge=1, le=1000, description="critic detector: trailing mean")
    critic_stall_gain: float = Field(
        default=0.02, ge=0.0, le=1.0, description="critic detector: less gain than this over stall_steps is a stall"
    )


class TeleoperatorConfig(FrozenConfig):
    """The simulated teleoperators: each serves the takeover queue one robot at a time with the scripted expert."""

    enabled: bool = Field(
        default=True, description="simulate teleoperators; false: no simulated one serves the takeover queue"
    )
    count: int = Field(default=1, ge=1, le=64, description="teleoperators, each holding at most one robot")
    allocation: Literal["fifo", "priority"] = Field(
        default="fifo",
        description="which waiting robot a free teleoperator takes: fifo, the one that asked first; priority, the "
        "one that lost the most progress (Fleet-DAgger style)",
    )
    reaction_s: float = Field(default=2.0, ge=0.0, description="from grant to first command")
    rewind: Literal["none", "steps", "in_distribution"] = Field(
        default="in_distribution",
        description="what a teleoperator does first once it has reacted: none, corrects from where the robot is; "
        "steps, rewinds rewind_steps; in_distribution, rewinds to where the critic (without one, ground-truth "
        "progress) rated the branch at its best",
    )
    rewind_steps: int = Field(default=20, ge=1, description="how far back a 'steps' rewind goes")
    release: Literal["phase_advanced", "phase_held", "progress_regained", "success"] = Field(
        default="phase_held",
        description="when a correction hands back: phase_advanced, as soon as the task's phase is past the one the "
        "correction started in; phase_held, once it has stayed past it for release_steps; progress_regained, "
        "release_steps after progress first exceeds the best the attempt reached before the takeover; success, "
        "only when the task succeeds. Every rule also hands back on success and after max_steps. The default was "
        "chosen by benchmarks/release_rule.py on the quickstart (README)",
    )
    release_steps: int = Field(default=10, ge=1, le=10_000, description="the N of phase_held and progress_regained")
    handback_s: float = Field(default=1.0, ge=0.0, description="operator time to hand control back")
    max_steps: int = Field(default=200, ge=1, description="give up a correction after this many steps")
    expert: dict[str, Any] = Field(
        default_factory=lambda: {"action_noise": 0.05},
        description="ExpertConfig fields of the scripted expert, the teleoperators' hands in the sim workers",
    )


class RemoteInferenceConfig(FrozenConfig):
    """Chunks from ``vla-recover serve`` (vla_recover.serving), whose token is read from VLA_RECOVER_SERVE_TOKEN."""

    remote: str = Field(
        pattern=r"^http://[^/\s]+$", description="the policy server, http://HOST:PORT (loopback, or a trusted network)"
    )
    timeout_s: float = Field(
        default=10.0,
        gt=0.0,
        le=600.0,
        description="a request unanswered this long fails; a server unreachable this long (starting, restarting) "
        "stops the fleet",
    )


class FleetConfig(FrozenConfig):
    task: str = Field(default="PickPlaceBin", description="the task (name or gym id) every robot runs")
    task_config: dict[str, Any] = Field(
        default_factory=dict, description="the task's settings (its config class's fields, e.g. injected failures)"
    )
    robots: int | list[Any] = Field(
        default=4,
        description="the fleet's robots: a number of sim robots, or a list of entries, each a kind registered in "
        "vla_recover.fleet.robots.ROBOTS (sim, fake, ros2, lerobot:<type>) with its name, count, settings and safety "
        "limits, e.g. [{kind: sim, count: 8}, {kind: fake, name: bench_arm}]",
    )
    fake_robots: int = Field(
        default=0, ge=0, le=256, description="shorthand beside robots: N for {kind: fake, count: fake_robots}"
    )
    episodes: int = Field(default=20, ge=1, le=10_000_000, description="stop after this many finished episodes")
    sim_seconds: float | None = Field(None, gt=0.0, description="or after this much fleet sim time")
    operator_budget_s: float | None = Field(
        default=None, gt=0.0, description="or once the operators have spent this many seconds (equal human budgets)"
    )
    seed: int = Field(
        default=0, ge=0, description="first episode's seed: a run of N episodes plays seeds seed to seed + N - 1"
    )
    policy: Path | None = Field(None, description="a policy checkpoint directory")
    constant_action: list[float] | None = Field(None, description="instead of a policy (benchmarks, smoke tests)")
    inference: RemoteInferenceConfig | None = Field(
        None, description="instead of a local policy: a policy server's address, {remote: http://HOST:PORT}"
    )
    batched_inference: bool = Field(
        default=True,
        description="one policy forward for every robot that needs a chunk in a tick; false: one forward per robot",
    )
    run_ahead_steps: int = Field(
        default=4,
        ge=1,
        le=16,
        description="steps a sim worker may be ahead of the manager on the actions of the chunk it is executing (it "
        "steps while the manager records), topped up once half have landed; 1 is lockstep. The next chunk is planned "
        "once they have all landed, from the observation where it starts, so the policy runs as evaluation runs it. A "
        "takeover starts after the steps in flight",
    )
    failure_progress_drop: float = Field(
        default=0.15,
        gt=0.0,
        le=1.0,
        description="sim ground truth: progress this far below its best on the branch is a failure (the floor "
        "operator's ground_truth detector sees it; the failure report dates its onset from it)",
    )
    max_consecutive_faults: int = Field(
        default=3,
        ge=1,
        description="a robot whose worker dies this many times in a row, with no episode finished in between, stops "
        "the run with an error naming it and the last cause (a crash loop: restarting it again would spin forever); "
        "what each death interrupted is stored as aborted first",
    )
    probe_recoverability: bool = Field(
        default=True,
        description="sim: at each failure's onset and takeover grant, ask the worker whether the scripted expert "
        "could still complete the task from that exact state (the failure report's 'still recoverable')",
    )
    policy_action_tolerance: float = Field(
        default=1.0,
        ge=0.0,
        le=100.0,
        description="policy actions up to this far outside [-1, 1] are clipped into it; further out, the chunk is "
        "rejected and the robot holds",
    )
    compile_policy: bool = Field(default=False, description="torch.compile the policy's backbone before the run")
    device: DeviceName = Field(
        default="auto", description=f"where the policy and the critic run for the whole fleet: {DEVICE_HELP}"
    )
    store: Path = Field(default=Path("runs/fleet"), description="the episode store finished episodes are written to")
    backend: Literal["process", "ray"] = Field(
        default="process",
        description="process: sim robots in local worker processes (robots_per_process each); ray: one Ray actor "
        "per sim robot (ray_address)",
    )
    robots_per_process: int = Field(
        default=1,
        ge=1,
        le=256,
        description="sim robots sharing one worker process: more is faster on few cores (fewer messages and "
        "context switches per tick), one isolates robots (a crash takes down only its own)",
    )
    ray_address: str | None = Field(default=None, description="Ray cluster to join ('auto': local); None: start one")
    rewind_capacity: int = Field(
        default=200,
        ge=1,
        le=100_000,
        description="how many steps back from an attempt's furthest step a rewind can reach (sim workers keep "
        "the states that needs)",
    )
    critic: Path | None = Field(
        default=None,
        description="a progress critic checkpoint: it rates every step, drives the floor operator's 'critic' "
        "detector and picks in-distribution rewind targets; None: ground-truth progress (sim only)",
    )
    gate: Path | None = Field(
        default=None,
        description="a recovery gate directory (vla_recover.recovery): it judges every step and drives the floor "
        "operator's 'gate' detector; None: no gate",
    )
    critic_done_threshold: float | None = Field(
        default=None,
        gt=0.0,
        lt=1.0,
        description="a robot with no success detector (an arm) ends its episode as a success once the critic's done "
        "head rates a step at least this; needs critic, trained with done_head; None: a person labels its outcome",
    )
    critic_smooth_steps: int = Field(default=5, ge=1, le=1000, description="trailing mean over the critic's ratings")
    critic_tolerance: float = Field(
        default=0.02, ge=0.0, le=1.0, description="a rewind target is rated within this of the branch's best"
    )
    store_every_s: float = Field(
        default=2.0,
        ge=0.0,
        le=600.0,
        description="finished episodes are written in batches at least this often (wall seconds), and on close",
    )
    episode_tags: dict[str, Any] = Field(
        default_factory=dict, description="added to every stored episode's info (a loop marks its round this way)"
    )
    emit_corrections: bool = Field(default=False, description="also store each correction as an episode of its own")
    lease_ttl_s: float = Field(
        default=10.0,
        gt=0.0,
        description="fleet sim-clock seconds a takeover lease lasts unless renewed; then its robot holds",
    )
    floor_operator: FloorOperatorConfig = Field(
        default=FloorOperatorConfig(), description="the simulated floor operators"
    )
    teleoperator: TeleoperatorConfig = Field(default=TeleoperatorConfig(), description="the simulated teleoperators")

    @field_validator("robots", mode="before")
    @classmethod
    def _robots_shape(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | list):
            raise ValueError("expected a number of sim robots or a list of robot entries ({kind: ..., ...})")
        return value

    def robot_configs(self) -> list[RobotKindConfig]:
        """``robots`` (and ``fake_robots``) as one validated config per entry."""
        return robot_configs(self.robots, self.fake_robots)

    @model_validator(mode="before")
    @classmethod
    def _removed_fields(cls, data: Any) -> Any:
        if isinstance(data, dict) and "inference_lead_steps" in data:
            raise ValueError(
                f"inference_lead_steps: got {data['inference_lead_steps']!r}; removed: a fleet plans every chunk from "
                "the observation where it starts executing, as evaluation does (delete the field; run_ahead_steps "
                "keeps the sims busy while the manager records)"
            )
        return data

    @model_validator(mode="after")
    def _one_controller(self) -> FleetConfig:
        checked_task(self.task, self.task_config)
        configs = self.robot_configs()
        if not configs:
            raise ValueError("robots: a fleet needs at least one robot")
        if sum(c.count for c in configs) > 256:
            raise ValueError(f"robots: {sum(c.count for c in configs)} robots; a fleet runs 256 at most")
        for i, config in enumerate(configs):
            task = config.task if isinstance(config, SimRobotsConfig) else None
            if task is not None and resolve_task_name(task) != resolve_task_name(self.task):
                raise ValueError(f"robots[{i}].kind: sim:{task} in a fleet of {self.task}; a fleet runs one task")
        slot_names(configs)
        controllers = [self.policy, self.constant_action, self.inference]
        if sum(c is not None for c in controllers) != 1:
            raise ValueError(
                "policy / constant_action / inference: give exactly one (a checkpoint directory, an action, or a "
                "policy server's address)"
            )
        detector = self.floor_operator.detector
        if detector.startswith("critic") and self.critic is None:
            raise ValueError(f"floor_operator.detector: {detector!r} needs critic (a critic checkpoint directory)")
        if self.critic_done_threshold is not None and self.critic is None:
            raise ValueError("critic_done_threshold: needs critic (a critic checkpoint with a done head)")
        if detector.startswith("gate") and self.gate is None:
            raise ValueError(f"floor_operator.detector: {detector!r} needs gate (a recovery gate directory)")
        return self
