"""The pictures an operator looks at: progress curves with ground truth, cut segments and intervention spans."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.patches import Patch

from vla_recover.critic.data import CriticEpisode
from vla_recover.critic.model import ProgressCritic
from vla_recover.critic.segmenter import CRITIC_KINDS

__all__ = ["KIND_COLOURS", "draw_episode", "plot_confusions", "plot_episode_file", "plot_held_out", "plot_loss"]

KIND_COLOURS = {
    "progress": "#2ca02c",
    "idle": "#bbbbbb",
    "failure_inducing": "#d62728",
    "recovery": "#1f77b4",
    "intervention": "#ff7f0e",
    "rewind": "#9467bd",
}


def plot_loss(losses: Sequence[float], out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(np.arange(1, len(losses) + 1), losses, color="tab:blue", alpha=0.4, lw=0.8, label="loss")
    window = max(1, len(losses) // 50)
    if len(losses) >= window:
        smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
        ax.plot(np.arange(window, len(losses) + 1), smooth, color="tab:blue", label=f"mean of {window}")
    ax.set_xlabel("step")
    ax.set_ylabel("critic loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def draw_episode(
    ax: Axes,
    predicted: np.ndarray,
    rows: np.ndarray,
    length: int,
    true_progress: np.ndarray | None = None,
    critic_segments: Sequence[tuple[int, int, str]] = (),
    supervision: Sequence[tuple[int, int, str]] = (),
    title: str = "",
) -> None:
    """Progress over episode rows: predicted and true curves, critic segments as a band, interventions and rewinds
    shaded behind."""
    for start, stop, kind in supervision:
        if kind in ("intervention", "rewind"):
            ax.axvspan(start - 0.5, stop - 0.5, color=KIND_COLOURS[kind], alpha=0.15, lw=0)
    for start, stop, kind in critic_segments:
        ax.axvspan(start - 0.5, stop - 0.5, ymin=0.0, ymax=0.06, color=KIND_COLOURS.get(kind, "k"), lw=0)
    # a gap in the rows is a rewind: break the lines there rather than draw across it
    gaps = np.flatnonzero(np.diff(rows) > 1) + 1
    x = np.insert(rows.astype(np.float64), gaps, np.nan)
    if true_progress is not None:
        ax.plot(x, np.insert(true_progress, gaps, np.nan), color="k", lw=1.2, ls="--", label="ground truth")
    ax.plot(x, np.insert(np.asarray(predicted, np.float64), gaps, np.nan), color="tab:green", lw=1.8, label="critic")
    ax.set_xlim(-0.5, max(length, 1) - 0.5)
    ax.set_ylim(-0.08, 1.05)
    ax.set_xlabel("step")
    ax.set_ylabel("progress")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)


def _save_with_legend(fig: plt.Figure, out: Path, bottom: float) -> Path:
    _legend(fig)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _legend(fig: plt.Figure) -> None:
    handles: list[Artist] = [Patch(color=c, label=kind.replace("_", " ")) for kind, c in KIND_COLOURS.items()]
    handles += [
        plt.Line2D([], [], color="tab:green", label="critic"),
        plt.Line2D([], [], color="k", ls="--", label="ground truth"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, frameon=False)


def plot_held_out(critic: ProgressCritic, episodes: list[CriticEpisode], out: Path, count: int = 6) -> Path:
    chosen = sorted(episodes, key=lambda e: (not e.success, e.id))[:count]
    columns = min(3, len(chosen))
    rows = (len(chosen) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.0 * rows + 0.8), squeeze=False)
    for ax, episode in zip(axes.flat, chosen, strict=False):
        curve = critic.predict(episode.inputs, episode.instruction)
        draw_episode(
            ax, curve, episode.rows, episode.length, episode.true_progress, supervision=episode.supervision,
            title=f"episode {episode.id} ({episode.outcome}, {episode.length} steps)",
        )  # fmt: skip
    for ax in list(axes.flat)[len(chosen) :]:
        ax.axis("off")
    return _save_with_legend(fig, out, bottom=0.08)


def plot_episode_file(
    episode: CriticEpisode,
    predicted: np.ndarray,
    critic_segments: Sequence[tuple[int, int, str]],
    out: Path,
) -> Path:
    fig, ax = plt.subplots(figsize=(9, 3.8))
    draw_episode(
        ax, predicted, episode.rows, episode.length, episode.true_progress, critic_segments, episode.supervision,
        title=f"episode {episode.id}: {episode.instruction} ({episode.outcome})",
    )  # fmt: skip
    return _save_with_legend(fig, out, bottom=0.12)


def plot_confusions(confusions: dict[str, np.ndarray], out: Path) -> Path:
    """Side by side, one per segmenter: steps of each true kind (rows) by the kind cut (columns), as a share of the
    row, with the row's step count on its label."""
    names = [kind.replace("_", " ") for kind in CRITIC_KINDS]
    fig, axes = plt.subplots(1, len(confusions), figsize=(4.6 * len(confusions), 4.2), squeeze=False)
    for ax, (title, counts) in zip(axes.flat, confusions.items(), strict=True):
        shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
        ax.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0)
        for (row, column), share in np.ndenumerate(shares):
            ax.text(column, row, f"{share:.2f}", ha="center", va="center", color="white" if share > 0.6 else "black")
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_yticks(range(len(names)), [f"{n} ({int(c)})" for n, c in zip(names, counts.sum(axis=1), strict=True)])
        ax.set_xlabel("cut as")
        ax.set_ylabel("ground truth (steps)")
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
