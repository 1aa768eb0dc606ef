"""The loop report's PNG plots, one per figure a reader would rather look at than read; a plot no round has data
for is skipped (the report says so) rather than drawn empty."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import PercentFormatter

from vla_recover.critic.plots import KIND_COLOURS
from vla_recover.critic.segmenter import CRITIC_KINDS
from vla_recover.loop.summary import Round, View

__all__ = ["PLOTS", "Plot", "draw_methods_per_round", "draw_plots"]


@dataclass(frozen=True)
class Plot:
    file: str
    title: str
    has_data: Callable[[View, Round], bool]
    draw: Callable[[Axes, View], None]
    why_skipped: str


def _round_axis(ax: Axes, view: View, ylabel: str) -> None:
    ax.set_xticks([r.round for r in view.rounds], [f"{r.round}\n{r.policy}" for r in view.rounds], fontsize=8)
    ax.set_xlim(view.rounds[0].round - 0.6, view.rounds[-1].round + 0.6)
    ax.set_xlabel("round (policy trained)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, axis="y")


def _draw_success(ax: Axes, view: View) -> None:
    x = np.array([r.round for r in view.rounds])
    rate = np.array([r.eval.success_rate for r in view.rounds])
    low = np.clip(rate - [r.eval.ci95[0] for r in view.rounds], 0, None)
    high = np.clip(np.array([r.eval.ci95[1] for r in view.rounds]) - rate, 0, None)
    ax.errorbar(x, rate, yerr=np.vstack([low, high]), fmt="none", ecolor="k", capsize=4, lw=1)
    promoted = np.array([r.promoted for r in view.rounds])
    if promoted.any():
        ax.scatter(x[promoted], rate[promoted], s=70, color="tab:green", zorder=3, label="promoted")
    if not promoted.all():
        ax.scatter(x[~promoted], rate[~promoted], s=70, facecolor="white", edgecolor="tab:red", zorder=3,
                   label="not promoted")  # fmt: skip
    by_policy = {r.policy: r.eval.success_rate for r in view.rounds}
    deployed = [by_policy.get(r.current or "", np.nan) for r in view.rounds]
    ax.step(x, deployed, where="post", color="tab:green", ls="--", lw=1, alpha=0.7, label="current version")
    ax.set_ylim(0, 1.05)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    _round_axis(ax, view, "success rate (95% CI)")
    ax.legend(fontsize=8, loc="lower right")


def _bars(
    value: Callable[[View, Round], float | None], ylabel: str, colour: str, label: str = "{:.1f}"
) -> Callable[[Axes, View], None]:
    def draw(ax: Axes, view: View) -> None:
        points = [(r.round, v) for r in view.rounds if (v := value(view, r)) is not None]
        ax.bar([p[0] for p in points], [p[1] for p in points], width=0.6, color=colour)
        for x, v in points:
            ax.annotate(label.format(v), (x, v), ha="center", va="bottom", fontsize=8, xytext=(0, 2),
                        textcoords="offset points")  # fmt: skip
        ax.margins(y=0.12)  # room for the value labels under the title
        _round_axis(ax, view, ylabel)

    return draw


def _draw_throughput(ax: Axes, view: View) -> None:
    _bars(lambda v, r: v.robot_rate(r), "successes per robot-hour", "tab:blue")(ax, view)
    if (base := view.base_throughput()) is not None:
        ax.axhline(base, color="k", ls="--", lw=1, label="base policy's fleet")
        ax.legend(fontsize=8)


def _stacked(ax: Axes, view: View, parts: Callable[[Round], dict[str, float]], order: list[str]) -> None:
    colours = plt.get_cmap("tab10")
    bottom = np.zeros(len(view.rounds))
    x = [r.round for r in view.rounds]
    for i, key in enumerate(order):
        heights = np.array([parts(r).get(key, 0.0) for r in view.rounds])
        colour = KIND_COLOURS.get(key, colours(i % 10))
        ax.bar(x, heights, width=0.6, bottom=bottom, color=colour, label=key.replace("_", " "))
        bottom += heights
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)


def _draw_operator(ax: Axes, view: View) -> None:
    roles = sorted({role for r in view.rounds if r.fleet for role in r.fleet.operator_s})
    _stacked(ax, view, lambda r: dict(r.fleet.operator_s) if r.fleet else {}, roles)
    _round_axis(ax, view, "operator seconds")


def _draw_segments(ax: Axes, view: View) -> None:
    seen = {kind for r in view.rounds for kind in r.segments}
    order = [k for k in CRITIC_KINDS if k in seen] + sorted(seen - set(CRITIC_KINDS))
    _stacked(ax, view, view.segment_fractions, order)
    ax.set_ylim(0, 1.0)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    _round_axis(ax, view, "share of fleet steps")


PLOTS = (
    Plot("success_rate.png", "Closed-loop success rate per round", lambda v, r: True, _draw_success, ""),
    Plot("throughput.png", "Fleet throughput (successes per robot-hour)",
          lambda v, r: v.robot_rate(r) is not None, _draw_throughput, "no round has fleet throughput"),
    Plot("operator_time.png", "Operator time by role",
          lambda v, r: bool(r.fleet and r.fleet.operator_s), _draw_operator, "no round has operator time"),
    Plot("return_on_human_effort.png", "Return on human effort (Fleet-DAgger's ROHE)",
          lambda v, r: bool(r.fleet and r.fleet.rohe is not None),
          _bars(lambda v, r: r.fleet.rohe if r.fleet else None, "humans/robots · successes / (1 + human steps)",
                "tab:purple", "{:.3f}"),
          "no round has a fleet with its human steps counted"),
    Plot("segment_mix.png", "Critic segment kinds in the fleet data",
          lambda v, r: bool(v.segment_fractions(r)), _draw_segments, "no round has critic segments"),
    Plot("intervention_rate.png", "Intervention rate (interventions per fleet episode)",
          lambda v, r: v.intervention_rate(r) is not None,
          _bars(lambda v, r: v.intervention_rate(r), "interventions per episode", "tab:orange", "{:.2f}"),
          "no round has fleet episodes with interventions counted"),
)  # fmt: skip


def draw_plots(view: View, plots_dir: Path, name: str) -> list[tuple[Plot, Path | None]]:
    plots_dir.mkdir(parents=True, exist_ok=True)
    drawn: list[tuple[Plot, Path | None]] = []
    for plot in PLOTS:
        out = plots_dir / plot.file
        if not any(plot.has_data(view, r) for r in view.rounds):
            out.unlink(missing_ok=True)  # never leave a stale picture from an earlier report beside this one
            drawn.append((plot, None))
            continue
        fig, ax = plt.subplots(figsize=(7, 4))
        plot.draw(ax, view)
        ax.set_title(f"{name}: {plot.title}", fontsize=10)
        fig.tight_layout()
        fig.savefig(out, dpi=110)
        plt.close(fig)
        drawn.append((plot, out))
    return drawn


# Reference rows of a method comparison, drawn apart from the methods: the baselines dashed, the ceiling dotted.
_REFERENCE_STYLE = {"more_demos": "--", "more_demos_perturbed": "--", "dagger_oracle": ":"}


def draw_methods_per_round(curves: dict[str, list[float | None]], path: Path, title: str) -> Path:
    """One line per method: its success after each round (round 0: the base), as ``benchmarks/loop.py`` compares
    methods from one base; the baselines dashed, the oracle dotted. A missing round is a gap."""
    fig, ax = plt.subplots(figsize=(8.5, 5))
    colours = plt.get_cmap("tab20")
    for i, (method, values) in enumerate(curves.items()):
        y = np.array([np.nan if v is None else v for v in values], dtype=float)
        style = _REFERENCE_STYLE.get(method, "-")
        ax.plot(np.arange(len(y)), y, style, marker="o", ms=4, color=colours(i % 20), label=method,
                lw=2.2 if style == "-" else 1.4)  # fmt: skip
    rounds = max((len(v) for v in curves.values()), default=1)
    ax.set_xticks(range(rounds), ["base", *(str(r) for r in range(1, rounds))])
    ax.set_xlabel("round")
    ax.set_ylabel("success on the final-test seeds")
    ax.set_ylim(0, 1.02)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.grid(alpha=0.3, axis="y")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
