"""One trainer for every objective: data selection + a weighter + a policy's weighted loss.

AdamW with linear warm-up then cosine decay, gradient clipping, EMA of weights (on by default). Resuming from a
checkpoint restores weights, EMA, optimiser moments, the torch and sampler random states and the step, so the loss
curve after a resume is the one an uninterrupted run draws.
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field, model_validator
from safetensors.torch import load_file, save_file

from vla_recover.config import FrozenConfig, validate_nested
from vla_recover.data import EpisodeStore, WindowSampler, WindowSpec
from vla_recover.devices import DEVICE_HELP, DeviceName, autocast, resolve_device
from vla_recover.policies import POLICIES, Policy, build_policy
from vla_recover.policies.common.checkpoint import host_copy, save_policy
from vla_recover.policies.common.ema import EMA
from vla_recover.policies.common.encoders import SentenceEmbedder
from vla_recover.policies.common.optim import make_optimizer
from vla_recover.policies.common.recovery_head import RecoveryGateNet
from vla_recover.train.dataset import DatasetConfig, build_step_weights, with_failures
from vla_recover.train.distributed import gather_states, global_share, mean_over_ranks, rank_seed, start_ranks
from vla_recover.train.prefetch import Prefetcher

__all__ = ["TrainConfig", "Trainer", "make_optimizer"]


class DataSelection(FrozenConfig):
    outcomes: tuple[str, ...] | None = Field(
        default=None, description="only episodes with these outcomes (success, failure, truncated, aborted); None: all"
    )
    actors: tuple[str, ...] | None = Field(
        default=None, description="only anchor steps these actors chose (policy, human, guided, scripted); None: all"
    )
    segment_kinds: tuple[str, ...] | None = Field(
        default=None, description="only anchor steps inside a segment of one of these kinds; None: any step"
    )
    segment_source: str | None = Field(
        default=None, description="segment_kinds: only segments from this source (supervision, critic); None: any"
    )
    episodes: tuple[int, ...] | None = Field(default=None, description="only these episode ids (a loop round's data)")


class TrainConfig(FrozenConfig):
    """``vla-recover train``: which policy, on which data, for how long."""

    policy: str = Field(
        default="diffusion",
        description="a policy registered in vla_recover.policies.POLICIES (diffusion, flow, lerobot_diffusion, ...)",
    )
    policy_config: dict[str, Any] = Field(
        default_factory=dict, description="the policy's config class's fields (horizons, network sizes, inputs, ...)"
    )
    data: Path = Field(default=Path("runs/demos"), description="the episode store to train on")
    out: Path = Field(
        default=Path("runs/train"),
        description="run folder: metrics.jsonl, weights.json, checkpoints/ and the final policy/",
    )
    select: DataSelection = Field(default=DataSelection(), description="which stored steps may anchor a window")
    weighting: DatasetConfig = Field(
        default=DatasetConfig(), description="retention and weighter: which steps train, with what weight"
    )
    init_from: Path | None = Field(
        default=None,
        description="fine-tune: start from this policy checkpoint (weights and normalisation) instead of scratch",
    )
    steps: int = Field(default=3000, ge=1, le=10_000_000, description="gradient steps in all")
    batch_size: int = Field(
        default=256, ge=1, le=65_536, description="windows per gradient step, over all processes under torchrun"
    )
    lr: float = Field(
        default=3e-4, gt=0.0, le=1.0, description="AdamW's peak learning rate: linear warm-up to it, cosine decay to 0"
    )
    weight_decay: float = Field(default=1e-6, ge=0.0, le=1.0, description="AdamW's weight decay")
    warmup_steps: int = Field(default=200, ge=0, description="steps of linear learning-rate warm-up")
    grad_clip: float = Field(default=1.0, gt=0.0, description="gradient norm clipped to this before each step")
    ema: bool = Field(
        default=True, description="keep an exponential moving average of the weights: the policy saved and evaluated"
    )
    ema_power: float = Field(
        default=0.75, gt=0.0, le=1.0, description="EMA warm-up: decay at step t is min(0.9999, 1 - (1 + t) ** -power)"
    )
    seed: int = Field(default=0, ge=0, description="seed of torch and the window sampler")
    log_every: int = Field(default=25, ge=1, description="steps between metrics records (mean loss since the last)")
    save_every: int = Field(default=1000, ge=1, description="steps between checkpoints; the last step saves one too")
    eval_every: int = Field(default=0, ge=0, description="closed-loop evaluation period in steps; 0: only at the end")
    eval_task: str | None = Field(
        default=None, description="the task the policy is evaluated on in closed loop (vla-recover train); None: none"
    )
    eval_episodes: int = Field(default=20, ge=1, description="episodes per evaluation, one per seed from eval_seed")
    eval_seed: int = Field(default=100_000, ge=0, description="first held-out seed")
    threads: int = Field(default=0, ge=0, description="torch CPU threads; 0: torch's default")
    device: DeviceName = Field(default="auto", description=f"where the policy trains: {DEVICE_HELP}")
    bf16: bool = Field(
        default=False, description="bfloat16 autocast for the forward and loss on CUDA (the CPU and MPS ignore it)"
    )
    prefetch: int = Field(
        default=2, ge=0, le=64, description="batches a background thread draws ahead of the device (0: in line)"
    )
    compile: bool = Field(default=False, description="torch.compile the denoiser: ~1 min once, then faster steps")

    @model_validator(mode="after")
    def _policy_config_fits(self) -> TrainConfig:
        if self.policy not in POLICIES:
            raise ValueError(f"field 'policy': got {self.policy!r}; valid choices: {', '.join(POLICIES.names())}")
        self.policy_settings()
        return self

    @model_validator(mode="after")
    def _failures_have_a_generator(self) -> TrainConfig:
        guided = getattr(self.policy_settings(), "failure_guidance", None) is not None
        failures = self.weighting.failures != "none"
        if guided != failures:
            raise ValueError(
                f"weighting.failures: got {self.weighting.failures!r} for a policy "
                f"{'with' if guided else 'without'} policy_config.failure_guidance; the failure generator and the "
                "data it learns from come together (set both or neither)"
            )
        return self

    def policy_settings(self) -> Any:
        """``policy_config`` as the policy's own config class."""
        return validate_nested(POLICIES.get(self.policy).config_cls, self.policy_config, "policy_config")


def _generator_config(policy: Policy) -> Any:
    """The policy's config without its second generators: what must match for one to fine-tune into the other."""
    if not hasattr(policy.config, "failure_guidance"):
        return policy.config
    return policy.config.model_copy(update={"failure_guidance": None, "recovery": None})


class Trainer:
    def __init__(self, config: TrainConfig) -> None:
        self.config = config
        # refused here, before any data is read, when it is not there; under torchrun, each rank's share of it
        self.ranks, self.device = start_ranks(resolve_device(config.device))
        if config.batch_size % self.ranks.world:
            raise ValueError(
                f"batch_size: {config.batch_size} does not split evenly over the {self.ranks.world} processes "
                "(it is the global batch)"
            )
        if config.threads:
            torch.set_num_threads(config.threads)
        torch.manual_seed(config.seed)
        self.store = EpisodeStore(config.data)
        if len(self.store) == 0:
            raise ValueError(f"data: store {config.data} holds no episodes")
        policy_cls_config = config.policy_settings()
        specs = self.store.specs()
        keys = ([policy_cls_config.state_key] if policy_cls_config.state_key else []) + list(
            policy_cls_config.image_keys
        )
        for key in [*keys, "action"]:
            if key not in specs:
                raise KeyError(f"policy input {key!r} is not in store {config.data}; keys: {', '.join(sorted(specs))}")
        shapes = {k: specs[k].shape for k in keys}
        self.policy: Policy = build_policy(config.policy, config.policy_config, shapes, specs["action"].shape[0])
        weights, self.weight_stats = build_step_weights(self.store, config.weighting, config.select.episodes)
        self.failure: np.ndarray | None = None  # per stored step: trains AFIL's failure generator
        if config.weighting.failures != "none":
            weights, self.failure, failure_stats = with_failures(
                self.store, weights, config.weighting, config.select.episodes
            )
            self.weight_stats.update(failure_stats)
        select = config.select
        self.sampler = WindowSampler(
            self.store,
            WindowSpec(
                tuple(keys),
                policy_cls_config.obs_horizon,
                policy_cls_config.action_horizon,
                cross_boundary_targets=config.weighting.cross_boundary_targets,
            ),
            outcomes=select.outcomes,
            actors=select.actors,
            segment_kinds=select.segment_kinds,
            segment_source=select.segment_source,
            step_weights=weights,
            seed=rank_seed(config.seed, self.ranks.rank),
        )
        if len(self.sampler) == 0:
            raise ValueError(f"select: no step of {config.data} passes the selection {select.model_dump()}")
        self.parent_version: str | None = None  # the version this run fine-tunes
        if config.init_from is not None:
            self._load_initial(config.init_from)
        else:
            anchors = self.sampler.anchors
            self.policy.fit_normalizer({k: self.store.read(k)[anchors] for k in self.policy.normalizer.keys})
        self.recovery: np.ndarray | None = None  # per stored step: trains the recovery head (human corrections)
        self._routing_gate: RecoveryGateNet | None = None  # head_rows: gate; a CPU copy for the batch workers
        if self.policy.recovery_gate is not None:
            self.recovery = self._train_recovery_gate()
            if self.policy.config.recovery.head_rows == "gate":
                self._routing_gate = copy.deepcopy(self.policy.recovery_gate).cpu()
        self.policy.to(self.device)
        self.embedder = SentenceEmbedder()
        self._episode_embedding: np.ndarray | None = None
        if policy_cls_config.use_language:
            rows = self.store.episodes()
            table = self.embedder.embed([r.instruction for r in rows])
            self._episode_embedding = np.zeros((max(r.id for r in rows) + 1, table.shape[1]), np.float32)
            self._episode_embedding[[r.id for r in rows]] = table
        self.optimizer = make_optimizer(self.policy, config.lr, config.weight_decay)
        self.ema = EMA(self.policy, power=config.ema_power) if config.ema else None
        if config.compile:  # after the EMA copy: the average stays a plain module
            self.policy.compile_backbone()
        self.model = self._model_to_call()
        self.step = 0
        self.history: list[dict[str, float]] = []
        self._batches = Prefetcher(self._host_batch, self._sampler_state, self._set_sampler_state, config.prefetch)

    def _sampler_state(self) -> Mapping[str, Any]:
        return self.sampler.rng.bit_generator.state

    def _set_sampler_state(self, state: Mapping[str, Any]) -> None:
        self.sampler.rng.bit_generator.state = state

    def _model_to_call(self) -> torch.nn.Module:
        """What a step calls: the policy, or DDP around it under torchrun."""
        if not self.ranks.distributed:
            return self.policy
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(
            self.policy,
            device_ids=[self.device.index] if self.device.type == "cuda" else None,
            broadcast_buffers=False,  # normalisation statistics: fitted on the same rows by every rank
            find_unused_parameters=bool(self.policy._generators()[1:]),  # a second generator without its rows
        )
        if self.ranks.rank:  # each rank's own training noise; rank 0 keeps one process's stream
            torch.manual_seed(rank_seed(self.config.seed, self.ranks.rank))
        return model

    def _load_initial(self, directory: Path) -> None:
        """Fine-tuning keeps the checkpoint's normalisation: the data it saw defines the policy's action space."""
        from vla_recover.policies.common.checkpoint import load_policy

        initial, _, saved = load_policy(directory)
        self.parent_version = saved["version"]["id"]
        if saved["policy"] != self.config.policy or _generator_config(initial) != _generator_config(self.policy):
            raise ValueError(
                f"init_from: {directory} holds a {saved['policy']} policy with a different config than "
                f"policy={self.config.policy!r} / policy_config; fine-tuning needs the same architecture"
            )
        state = initial.state_dict()
        own = f"{self.policy.backbone_attr}."
        for role in ("failure", "recovery"):
            if initial.second_generator(role) is None and self.policy.second_generator(role) is not None:
                # a second generator starts as a copy of the policy's own and learns how its rows differ
                state.update({f"{role}_{k}": v.clone() for k, v in state.items() if k.startswith(own)})
        # what only the checkpoint has is dropped (fine-tuning into one generator keeps the policy's own); what only
        # this policy has keeps its fresh value (a recovery gate, trained next)
        fresh = self.policy.state_dict()
        self.policy.load_state_dict({key: state.get(key, value) for key, value in fresh.items()})

    def _train_recovery_gate(self) -> np.ndarray:
        """Train the policy's recovery gate on the fleet's recorded failures among the training episodes; returns
        the rows that train the recovery head (the human corrections the sampler may draw)."""
        from vla_recover.critic.values import ValueTrainConfig
        from vla_recover.data.schema import ACTORS
        from vla_recover.recovery import GateConfig, train_gate

        head = getattr(self.policy.config, "recovery", None)
        assert head is not None and self.policy.recovery_gate is not None
        human = self.store.read("actor") == ACTORS.index("human")
        if not (human & (self.sampler.weights > 0)).any():
            raise ValueError(
                f"policy_config.recovery: no human correction in the training data of {self.config.data}; the "
                "recovery head would have nothing to learn from"
            )
        fit = ValueTrainConfig(hidden=head.gate_hidden, steps=head.gate_steps)
        gate_config = GateConfig(
            state_key=self.policy.config.state_key, use_delta=head.use_delta, smooth_steps=1,
            target_precision=head.target_precision, fit=fit, seed=self.config.seed,
        )  # fmt: skip
        gate = train_gate(self.store, self.config.select.episodes, gate_config)
        self.policy.recovery_gate.load_trained(gate.net.state_dict(), gate.threshold)
        self.weight_stats["recovery_gate"] = gate.metrics
        return human

    # -- training --------------------------------------------------------------------------------------------------
    def lr_at(self, step: int) -> float:
        cfg = self.config
        if step < cfg.warmup_steps:
            return cfg.lr * (step + 1) / cfg.warmup_steps
        progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    def _batch(self) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The next batch on the training device."""
        batch, weights = self._batches.next()
        if self.device.type == "cpu":
            return batch, weights
        move = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        return move, weights.to(self.device, non_blocking=True)

    def _host_batch(self) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The next batch in host memory (pinned for CUDA, so the copy overlaps the step)."""
        batch, weights = self._draw_batch()
        if self.device.type == "cuda":
            return {k: v.pin_memory() for k, v in batch.items()}, weights.pin_memory()
        return batch, weights

    def _draw_batch(self) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        raw = self.sampler.sample(self.config.batch_size // self.ranks.world)
        batch = {k: torch.as_tensor(v) for k, v in raw.items() if k not in ("weight", "episode", "index")}
        if self.failure is not None:
            batch["failure"] = torch.as_tensor(self.failure[raw["index"]])
        if self._episode_embedding is not None:
            batch["instruction_embedding"] = torch.as_tensor(self._episode_embedding[raw["episode"]])
        weights = torch.as_tensor(raw["weight"])
        if self.recovery is not None:
            batch, weights = self._route_to_head(batch, weights, raw["index"])
        return batch, weights

    def _route_to_head(
        self, batch: dict[str, torch.Tensor], weights: torch.Tensor, index: np.ndarray
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The batch with ``recovery`` (B,) bool on the rows that train the recovery head (``recovery.head_rows``)."""
        head = getattr(self.policy.config, "recovery", None)
        assert head is not None and self.recovery is not None
        if self._routing_gate is not None:  # each row trains the generator the gate samples its state from
            with torch.no_grad():
                flagged = self._routing_gate.rows(batch[self.policy.config.state_key], head.use_delta)
            return {**batch, "recovery": flagged}, weights
        corrections = self.recovery[index]
        if head.nominal_learns_corrections:
            # each correction window trains the nominal generator and, as a copy, the recovery head
            copies = torch.as_tensor(np.flatnonzero(corrections))
            batch = {k: torch.cat([v, v[copies]]) for k, v in batch.items()}
            weights = torch.cat([weights, weights[copies]])
            corrections = np.concatenate([np.zeros_like(corrections), np.ones(len(copies), dtype=bool)])
        return {**batch, "recovery": torch.as_tensor(corrections)}, weights

    def train_step(self) -> float:
        batch, weights = self._batch()
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(self.step)
        with autocast(self.device, self.config.bf16):
            loss = global_share(self.model(batch, weights), len(weights), self.ranks)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.config.grad_clip)
        self.optimizer.step()
        if self.ema is not None:
            self.ema.update(self.policy)
        self.step += 1
        return float(loss.detach())

    def run(
        self,
        on_step: Callable[[int, float], None] | None = None,
        evaluate: Callable[[Policy, SentenceEmbedder], dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Train to ``config.steps``, logging, checkpointing and evaluating on the way. Returns the final record."""
        cfg, main = self.config, self.ranks.main
        if main:
            cfg.out.mkdir(parents=True, exist_ok=True)
            (cfg.out / "weights.json").write_text(json.dumps(self.weight_stats, indent=1))
        metrics = (cfg.out / "metrics.jsonl").open("a") if main else None
        start = time.perf_counter()
        window: list[float] = []
        try:
            while self.step < cfg.steps:
                loss = self.train_step()
                window.append(loss)
                if on_step is not None:
                    on_step(self.step, loss)
                record: dict[str, Any] = {}
                if self.step % cfg.log_every == 0 or self.step == cfg.steps:
                    loss = mean_over_ranks(float(np.mean(window)), self.ranks, self.device)
                    record = {"step": self.step, "loss": loss, "lr": self.lr_at(self.step - 1)}
                    record["samples_per_s"] = cfg.batch_size * len(window) / max(time.perf_counter() - start, 1e-9)
                    window, start = [], time.perf_counter()
                if main and evaluate is not None and cfg.eval_every and self.step % cfg.eval_every == 0:
                    record = {"step": self.step, **record, **evaluate(self.inference_policy, self.embedder)}
                if record:
                    self.history.append(record)
                if record and metrics is not None:
                    metrics.write(json.dumps(record) + "\n")
                    metrics.flush()
                if self.step % cfg.save_every == 0 or self.step == cfg.steps:
                    self.save_checkpoint()
        finally:
            if metrics is not None:
                metrics.close()
            self._batches.close()
        final: dict[str, Any] = {"step": self.step}
        if not main:
            return final
        if evaluate is not None:
            final.update(evaluate(self.inference_policy, self.embedder))
            with (cfg.out / "metrics.jsonl").open("a") as f:
                f.write(json.dumps({"final": True, **final}) + "\n")
        self.save_policy(cfg.out / "policy")
        return final

    def save_policy(self, directory: Path) -> Path:
        """The inference policy as a checkpoint, its version named after the run and the version it started from."""
        return save_policy(
            self.inference_policy, directory, self.embedder, name=self.config.out.name, parent=self.parent_version,
            train_steps=self.step,
        )  # fmt: skip

    @property
    def inference_policy(self) -> Policy:
        return self.ema.model if self.ema is not None else self.policy

    # -- checkpoints -------------------------------------------------------------------------------------------------
    def save_checkpoint(self) -> Path:
        """Rank 0 writes every rank's state; every rank must call it (their random states are gathered)."""
        directory = self.config.out / "checkpoints" / f"step_{self.step:08d}"
        own = {"sampler": self._batches.state(), "torch": torch.get_rng_state()}
        if self.device.type == "cuda":  # the training noise is drawn on the device
            own["cuda"] = torch.cuda.get_rng_state(self.device)
        states = gather_states(own, self.ranks)
        if not self.ranks.main:
            return directory
        self.save_policy(directory / "policy")
        tensors = {f"model.{k}": host_copy(v) for k, v in self.policy.state_dict().items()}
        if self.ema is not None:
            tensors.update({f"ema.{k}": host_copy(v) for k, v in self.ema.model.state_dict().items()})
        optimizer_state = self.optimizer.state_dict()
        for index, state in optimizer_state["state"].items():
            for name, value in state.items():
                tensors[f"optimizer.{index}.{name}"] = host_copy(torch.as_tensor(value))
        for rank, state in enumerate(states):  # rank 0's under the names one process uses
            prefix = f"rank{rank}." if rank else ""
            tensors[f"{prefix}torch_rng"] = state["torch"]
            if "cuda" in state:
                tensors[f"{prefix}cuda_rng"] = state["cuda"]
        save_file(tensors, str(directory / "train_state.safetensors"))
        meta = {
            "step": self.step,
            "ema_step": self.ema.step if self.ema is not None else 0,
            "sampler_rng": states[0]["sampler"],
            "ranks": self.ranks.world,
            "sampler_rng_by_rank": [state["sampler"] for state in states[1:]],
            "param_groups": optimizer_state["param_groups"],
            "config": self.config.model_dump(mode="json"),
        }
        (directory / "train_state.json").write_text(json.dumps(meta))
        (self.config.out / "latest").write_text(directory.name)
        return directory

    def resume(self, directory: str | Path | None = None) -> bool:
        """Continue from ``directory`` or the run's latest checkpoint; False when there is none."""
        if directory is None:
            latest = self.config.out / "latest"
            if not latest.is_file():
                return False
            directory = self.config.out / "checkpoints" / latest.read_text().strip()
        directory = Path(directory)
        tensors = load_file(str(directory / "train_state.safetensors"))
        meta = json.loads((directory / "train_state.json").read_text())
        saved_by = meta.get("ranks", 1)
        if saved_by != self.ranks.world:
            raise ValueError(
                f"resume: {directory} was saved by {saved_by} process(es) and this run has {self.ranks.world}; "
                "resume with as many, or start a new run directory"
            )
        self.policy.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
        if self.ema is not None:
            self.ema.model.load_state_dict({k[4:]: v for k, v in tensors.items() if k.startswith("ema.")})
            self.ema.step = meta["ema_step"]
        state: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in tensors.items():
            if key.startswith("optimizer."):
                _, index, name = key.split(".", 2)
                state.setdefault(int(index), {})[name] = value
        self.optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
        rank = self.ranks.rank
        prefix = f"rank{rank}." if rank else ""
        torch.set_rng_state(tensors[f"{prefix}torch_rng"])
        if f"{prefix}cuda_rng" in tensors and self.device.type == "cuda":
            torch.cuda.set_rng_state(tensors[f"{prefix}cuda_rng"], self.device)
        self._batches.close()  # what was drawn ahead came from the state being replaced
        self._set_sampler_state(meta["sampler_rng_by_rank"][rank - 1] if rank else meta["sampler_rng"])
        self.step = meta["step"]
        return True
