"""Plots people would rather look at than numbers: the loss curve of a run."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

__all__ = ["plot_loss"]


def plot_loss(metrics: Path, out: Path) -> Path:
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    train = [r for r in records if "loss" in r]
    evals = [r for r in records if "eval_success_rate" in r]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([r["step"] for r in train], [r["loss"] for r in train], color="tab:blue", label="training loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    if evals:
        twin = ax.twinx()
        twin.plot([r["step"] for r in evals], [r["eval_success_rate"] for r in evals], "o-", color="tab:green",
                  label="closed-loop success")  # fmt: skip
        twin.set_ylim(0, 1.05)
        twin.set_ylabel("success rate")
    ax.set_title(metrics.parent.name)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
