"""Phase targets: per task phase, a few prototypes of where successful episodes are, and how far is "drifted".

Choices where the paper leaves things open or where we differ (ALGORITHMS.md, "ReGuide"):

- Phases come from a label (the store's ground-truth ``phase`` column, or any per-step array such as a critic's
  segmentation), not from binning clusters by normalised time: our stores carry phase labels, and a label is less
  brittle than time when demonstrations differ in speed. Clustering is then done per phase, on the latent alone
  (the normalised state; no PCA or Δ-features, since state vectors are small).
- Prototypes: a quota per cluster proportional to its size (largest remainders first), filled with the cluster's
  points nearest its mean.
- Thresholds are percentiles of the soft-min distance of the phase's own latents that were not chosen as
  prototypes (all of them when fewer than ``_MIN_HELD_OUT`` remain): a prototype's distance to itself is ~0, which
  would bias the percentiles low.
- The current phase is chosen without memory (see :meth:`PhaseTargets.current_phase`): a fleet's chunk source sees
  observation windows, not robot identities, so the paper's "switch after two consecutive steps" rule has no state
  to live in.
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import nn

from vla_recover.config import FrozenConfig
from vla_recover.data.store import EpisodeStore

__all__ = ["PhaseConfig", "PhaseTargets", "build_phase_targets", "kmeans"]

_MIN_HELD_OUT = 20  # fewest non-prototype latents for thresholds to be measured on them alone
_MAX_THRESHOLD_POINTS = 4096  # latents per phase whose distances set the thresholds (a random subset beyond)


class PhaseConfig(FrozenConfig):
    """How phase prototypes and drift thresholds are built."""

    clusters_per_phase: int = Field(default=10, ge=1, le=1000, description="k of the per-phase k-means")
    prototypes_per_phase: int = Field(
        default=100,
        ge=1,
        le=10000,
        description="prototypes kept per phase, shared among its clusters by size (all points when fewer)",
    )
    kmeans_iters: int = Field(default=50, ge=1, le=1000, description="most Lloyd iterations of the k-means")
    tau: float = Field(default=0.05, gt=0.0, le=10.0, description="soft-min temperature, in normalised-state units")
    lower_percentile: float = Field(default=30.0, ge=0.0, le=100.0, description="below: in distribution, unguided")
    upper_percentile: float = Field(default=90.0, ge=0.0, le=100.0, description="above: too far, no guidance")
    seed: int = Field(
        default=0,
        ge=0,
        description="seed of the k-means (plus the phase id) and of the subset of latents that sets the thresholds",
    )

    @model_validator(mode="after")
    def _ordered(self) -> PhaseConfig:
        if self.lower_percentile >= self.upper_percentile:
            raise ValueError(
                f"lower_percentile ({self.lower_percentile}) must be < upper_percentile ({self.upper_percentile})"
            )
        return self


def kmeans(points: np.ndarray, k: int, iters: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Lloyd's k-means with k-means++ seeding: (centres (k', D), labels (N,)), k' = min(k, N).

    An emptied cluster is re-seeded at the point farthest from its centre.
    """
    rng = np.random.default_rng(seed)
    points = np.asarray(points, dtype=np.float64)
    k = min(k, len(points))
    centres = [points[rng.integers(len(points))]]
    nearest = ((points - centres[0]) ** 2).sum(1)
    for _ in range(1, k):
        total = nearest.sum()
        pick = rng.choice(len(points), p=nearest / total) if total > 0 else rng.integers(len(points))
        centres.append(points[pick])
        nearest = np.minimum(nearest, ((points - points[pick]) ** 2).sum(1))
    centre = np.stack(centres)
    labels = np.zeros(len(points), dtype=np.int64)
    for _ in range(iters):
        squared = ((points[:, None, :] - centre[None]) ** 2).sum(-1)  # (N, k)
        labels = squared.argmin(1)
        updated = centre.copy()
        for c in range(k):
            members = points[labels == c]
            if len(members):
                updated[c] = members.mean(0)
            else:
                far = int(squared[np.arange(len(points)), labels].argmax())
                updated[c], labels[far] = points[far], c
        if np.allclose(updated, centre):
            break
        centre = updated
    return centre, labels


def _prototype_indices(points: np.ndarray, labels: np.ndarray, centres: np.ndarray, budget: int) -> np.ndarray:
    """Indices of up to ``budget`` prototypes: quota by cluster size, each cluster's points nearest its mean."""
    if len(points) <= budget:
        return np.arange(len(points))
    sizes = np.bincount(labels, minlength=len(centres))
    exact = budget * sizes / sizes.sum()
    quota = np.floor(exact).astype(np.int64)
    for c in np.argsort(-(exact - quota))[: budget - int(quota.sum())]:
        quota[c] += 1
    chosen = []
    for c, n in enumerate(np.minimum(quota, sizes)):
        members = np.flatnonzero(labels == c)
        order = np.argsort(((points[members] - centres[c]) ** 2).sum(1), kind="stable")
        chosen.append(members[order[:n]])
    return np.sort(np.concatenate(chosen))


class PhaseTargets(nn.Module):
    """Prototypes (P, M, D) of P phases (padded to M, ``mask`` marks real ones) and per-phase (lower, upper)."""

    phase_ids: torch.Tensor
    prototypes: torch.Tensor
    mask: torch.Tensor
    thresholds: torch.Tensor

    def __init__(
        self,
        phase_ids: torch.Tensor,
        prototypes: torch.Tensor,
        mask: torch.Tensor,
        thresholds: torch.Tensor,
        tau: float,
    ) -> None:
        super().__init__()
        self.register_buffer("phase_ids", torch.as_tensor(phase_ids, dtype=torch.int64))
        self.register_buffer("prototypes", torch.as_tensor(prototypes, dtype=torch.float32))
        self.register_buffer("mask", torch.as_tensor(mask, dtype=torch.bool))
        self.register_buffer("thresholds", torch.as_tensor(thresholds, dtype=torch.float32))
        self.tau = float(tau)

    @classmethod
    def fit(cls, latents: np.ndarray, phases: np.ndarray, config: PhaseConfig) -> PhaseTargets:
        """Targets from in-distribution latents (N, D) labelled with phases (N,); labels < 0 are ignored."""
        latents, phases = np.asarray(latents, dtype=np.float32), np.asarray(phases).astype(np.int64)
        if latents.ndim != 2 or phases.shape != latents.shape[:1]:
            raise ValueError(f"phases: expected shape ({len(latents)},) to match latents, got {phases.shape}")
        ids = np.unique(phases[phases >= 0])
        if ids.size == 0:
            raise ValueError("phases: no step has a known phase (all labels are -1)")
        chosen, held_out = [], []
        for p in ids:
            points = latents[phases == p]
            centres, labels = kmeans(points, config.clusters_per_phase, config.kmeans_iters, config.seed + int(p))
            index = _prototype_indices(points, labels, centres, config.prototypes_per_phase)
            rest = np.setdiff1d(np.arange(len(points)), index)
            chosen.append(points[index])
            held_out.append(points[rest] if rest.size >= _MIN_HELD_OUT else points)
        width = max(len(c) for c in chosen)
        prototypes = np.zeros((len(ids), width, latents.shape[1]), dtype=np.float32)
        mask = np.zeros((len(ids), width), dtype=bool)
        for row, c in enumerate(chosen):
            prototypes[row, : len(c)], mask[row, : len(c)] = c, True
        targets = cls(torch.as_tensor(ids), torch.as_tensor(prototypes), torch.as_tensor(mask),
                      torch.zeros(len(ids), 2), config.tau)  # fmt: skip
        rng = np.random.default_rng(config.seed)
        for row, (p, points) in enumerate(zip(ids, held_out, strict=True)):
            if len(points) > _MAX_THRESHOLD_POINTS:
                points = points[rng.choice(len(points), _MAX_THRESHOLD_POINTS, replace=False)]
            with torch.no_grad():
                d = targets.distance(torch.as_tensor(points), int(p)).numpy()
            low, high = np.percentile(d, [config.lower_percentile, config.upper_percentile])
            targets.thresholds[row] = torch.tensor([low, high])
        return targets

    def _rows(self, phase: int | torch.Tensor, batch: int) -> torch.Tensor:
        """Buffer rows (B,) of phase ids given as one int or a (B,) tensor."""
        phase = torch.as_tensor(phase, dtype=torch.int64, device=self.phase_ids.device).expand(batch).contiguous()
        rows = torch.searchsorted(self.phase_ids, phase).clamp_max(len(self.phase_ids) - 1)
        unknown = self.phase_ids[rows] != phase
        if unknown.any():
            raise ValueError(
                f"phase: {sorted(set(phase[unknown].tolist()))} not among the targets' phases {self.phase_ids.tolist()}"
            )
        return rows

    def distance(self, z: torch.Tensor, phase: int | torch.Tensor) -> torch.Tensor:
        """Soft-min distance (B,) of latents z (B, D) to their phase's prototypes: −τ·logsumexp(−‖z−g‖/τ).

        Differentiable in z; a small epsilon under the square root keeps the gradient finite at a prototype.
        """
        rows = self._rows(phase, z.shape[0])
        prototypes = self.prototypes[rows]  # (B, M, D)
        norms = ((z[:, None, :] - prototypes) ** 2).sum(-1).add(1e-12).sqrt()  # (B, M)
        norms = norms.masked_fill(~self.mask[rows], float("inf"))
        return -self.tau * torch.logsumexp(-norms / self.tau, dim=1)

    def lower(self, phase: torch.Tensor) -> torch.Tensor:
        return self.thresholds[self._rows(phase, phase.shape[0]), 0]

    def upper(self, phase: torch.Tensor) -> torch.Tensor:
        return self.thresholds[self._rows(phase, phase.shape[0]), 1]

    def current_phase(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(phase ids (B,), distances to them (B,)) for latents z (B, D).

        The phase is the one where z is least drifted on that phase's own scale, the score
        (d − lower) / (upper − lower): 0 at the phase's lower threshold, 1 at its upper one. Comparing raw distances
        would favour phases whose prototypes are dense; comparing to the upper threshold alone would not account for
        how spread the phase is. Stateless by design (module docstring).
        """
        with torch.no_grad():
            distances = torch.stack([self.distance(z, int(p)) for p in self.phase_ids], dim=1)  # (B, P)
            low, high = self.thresholds[:, 0], self.thresholds[:, 1]
            score = (distances - low) / (high - low).clamp_min(1e-6)
            best = score.argmin(1)
        return self.phase_ids[best], distances.gather(1, best[:, None])[:, 0]


def build_phase_targets(
    store: EpisodeStore,
    latents: np.ndarray,
    config: PhaseConfig,
    episode_ids: list[int] | None = None,
    phases: np.ndarray | None = None,
) -> PhaseTargets:
    """Targets from the store's successful episodes (optionally only those in ``episode_ids``).

    ``latents`` (N, D) and ``phases`` (N,) are per step of the whole store, in the order of ``store.read``;
    ``phases`` defaults to the store's ``phase`` column.
    """
    rows = store.episodes(outcome="success")
    if episode_ids is not None:
        wanted = set(episode_ids)
        rows = [row for row in rows if row.id in wanted]
    if not rows:
        scope = f"among episode_ids {sorted(episode_ids)}" if episode_ids is not None else f"in {store.path}"
        raise ValueError(f"outcome: no successful episodes {scope}; phase targets are built from successes")
    labels = np.asarray(store.read("phase") if phases is None else phases)
    if labels.shape != (len(latents),):
        raise ValueError(f"phases: expected one label per store step ({len(latents)},), got {labels.shape}")
    steps = np.concatenate([np.arange(row.start, row.stop) for row in rows])
    return PhaseTargets.fit(latents[steps], labels[steps], config)
