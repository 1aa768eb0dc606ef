"""The loop's report: ``report.md`` with a table per round, the promotion decisions, where the time went, and PNG plots.

``write_report(run_dir, summary)`` validates the summary (the loop's ``summary.json`` as a dict) in one place, so a
malformed one fails with the field named before anything is written, then draws the plots into ``run_dir/plots/``
and writes ``run_dir/report.md`` that embeds them by relative path. A plot no round has data for is skipped, and the
report says so, rather than drawn empty.

Throughput gain over base compares a round's fleet throughput (successes per robot-hour) with that of the first
round whose fleet ran the base policy; the fleet of round *r* runs the policy current after round *r - 1*.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import PercentFormatter

from vla_recover.config import validate_config
from vla_recover.critic.plots import KIND_COLOURS
from vla_recover.critic.segmenter import CRITIC_KINDS

__all__ = ["LoopSummary", "write_report"]


class _Section(BaseModel):
    # the summary is written by the loop and may gain fields: ignore what the report does not show
    model_config = ConfigDict(frozen=True, extra="ignore")


class EvalResult(_Section):
    success_rate: float = Field(ge=0.0, le=1.0)
    ci95: tuple[float, float]
    successes: int | None = None
    episodes: int | None = None
    mean_length: float | None = None


class Decision(_Section):
    candidate_rate: float | None = None
    current_rate: float | None = None
    diff_lower_bound: float | None = None
    confidence: float | None = None
    test: str | None = None
    shared_seeds: int | None = None
    candidate_only: int | None = None
    current_only: int | None = None
    p_value: float | None = None


class Fleet(_Section):
    episodes: int | None = None
    successes: int | None = None
    interventions: int | None = None
    rewinds: int | None = None
    operator_s: dict[str, float] = {}
    robot_hours: float | None = None
    wall_s: float | None = None
    successes_per_robot_hour: float | None = None
    successes_per_operator_hour: float | None = None
    successes_per_present_hour: float | None = None
    outcomes: dict[str, int] = {}
    failure_response: dict[str, float | int | None] = {}


class Train(_Section):
    steps: int | None = None
    wall_s: float | None = None
    final_loss: float | None = None
    weights: dict[str, float] = {}


class Guided(_Section):
    chunks: int | None = None
    guided_chunks: int | None = None
    successes: int | None = None
    episodes: int | None = None


class Demos(_Section):
    """A ``more_demos`` round: demonstrations bought with the human time a fleet round would have taken."""

    episodes: int | None = None
    successes: int | None = None
    human_s: float | None = None


class Round(_Section):
    round: int = Field(ge=0)
    policy: str
    eval: EvalResult
    promoted: bool = False
    current: str | None = None
    decision: Decision | None = None
    fleet: Fleet | None = None
    demos: Demos | None = None
    final_test: EvalResult | None = None
    segments: dict[str, float] = {}
    train: Train | None = None
    guided: Guided | None = None


class LoopSummary(_Section):
    name: str = "loop"
    task: str | None = None
    method: str | None = None
    eval_episodes: int | None = None
    eval_seed: int | None = None
    final_test_episodes: int | None = None
    final_test_seed: int | None = None
    rounds: list[Round] = Field(min_length=1)
    timings_s: dict[str, float] = {}


# ---------------------------------------------------------------- formatting


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, unit: str = "") -> str:
    if x is None:
        return "–"
    text = str(x) if isinstance(x, int) else f"{x:.1f}"  # counts stay whole, measurements get one decimal
    return f"{text} {unit}".rstrip()


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


# ---------------------------------------------------------------- derived numbers


@dataclass(frozen=True)
class _View:
    """The summary's rounds in order, with the numbers the report derives from them."""

    rounds: list[Round]
    fleet_policy: dict[int, str | None]  # round -> policy its fleet ran (current after the previous round)

    @classmethod
    def of(cls, summary: LoopSummary) -> _View:
        rounds = sorted(summary.rounds, key=lambda r: r.round)
        fleet_policy: dict[int, str | None] = {}
        previous: str | None = None
        for r in rounds:
            fleet_policy[r.round] = previous
            previous = r.current
        return cls(rounds, fleet_policy)

    def robot_rate(self, r: Round) -> float | None:
        f = r.fleet
        if f is None:
            return None
        if f.successes_per_robot_hour is not None:
            return f.successes_per_robot_hour
        return f.successes / f.robot_hours if f.successes is not None and f.robot_hours else None

    def operator_rate(self, r: Round) -> float | None:
        f = r.fleet
        if f is None:
            return None
        if f.successes_per_operator_hour is not None:
            return f.successes_per_operator_hour
        hours = sum(f.operator_s.values()) / 3600
        return f.successes / hours if f.successes is not None and hours > 0 else None

    def intervention_rate(self, r: Round) -> float | None:
        f = r.fleet
        return f.interventions / f.episodes if f and f.interventions is not None and f.episodes else None

    def base_throughput(self) -> float | None:
        base = self.rounds[0].policy
        for r in self.rounds:
            if self.fleet_policy[r.round] == base and (rate := self.robot_rate(r)) is not None:
                return rate
        return None

    def segment_fractions(self, r: Round) -> dict[str, float]:
        total = sum(r.segments.values())
        return {kind: steps / total for kind, steps in r.segments.items()} if total > 0 else {}


# ---------------------------------------------------------------- plots


@dataclass(frozen=True)
class _Plot:
    file: str
    title: str
    has_data: Callable[[_View, Round], bool]
    draw: Callable[[Axes, _View], None]
    why_skipped: str


def _round_axis(ax: Axes, view: _View, ylabel: str) -> None:
    ax.set_xticks([r.round for r in view.rounds], [f"{r.round}\n{r.policy}" for r in view.rounds], fontsize=8)
    ax.set_xlim(view.rounds[0].round - 0.6, view.rounds[-1].round + 0.6)
    ax.set_xlabel("round (policy trained)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, axis="y")


def _draw_success(ax: Axes, view: _View) -> None:
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
    value: Callable[[_View, Round], float | None], ylabel: str, colour: str, label: str = "{:.1f}"
) -> Callable[[Axes, _View], None]:
    def draw(ax: Axes, view: _View) -> None:
        points = [(r.round, v) for r in view.rounds if (v := value(view, r)) is not None]
        ax.bar([p[0] for p in points], [p[1] for p in points], width=0.6, color=colour)
        for x, v in points:
            ax.annotate(label.format(v), (x, v), ha="center", va="bottom", fontsize=8, xytext=(0, 2),
                        textcoords="offset points")  # fmt: skip
        ax.margins(y=0.12)  # room for the value labels under the title
        _round_axis(ax, view, ylabel)

    return draw


def _draw_throughput(ax: Axes, view: _View) -> None:
    _bars(lambda v, r: v.robot_rate(r), "successes per robot-hour", "tab:blue")(ax, view)
    if (base := view.base_throughput()) is not None:
        ax.axhline(base, color="k", ls="--", lw=1, label="base policy's fleet")
        ax.legend(fontsize=8)


def _stacked(ax: Axes, view: _View, parts: Callable[[Round], dict[str, float]], order: list[str]) -> None:
    colours = plt.get_cmap("tab10")
    bottom = np.zeros(len(view.rounds))
    x = [r.round for r in view.rounds]
    for i, key in enumerate(order):
        heights = np.array([parts(r).get(key, 0.0) for r in view.rounds])
        colour = KIND_COLOURS.get(key, colours(i % 10))
        ax.bar(x, heights, width=0.6, bottom=bottom, color=colour, label=key.replace("_", " "))
        bottom += heights
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)


def _draw_operator(ax: Axes, view: _View) -> None:
    roles = sorted({role for r in view.rounds if r.fleet for role in r.fleet.operator_s})
    _stacked(ax, view, lambda r: dict(r.fleet.operator_s) if r.fleet else {}, roles)
    _round_axis(ax, view, "operator seconds")


def _draw_segments(ax: Axes, view: _View) -> None:
    seen = {kind for r in view.rounds for kind in r.segments}
    order = [k for k in CRITIC_KINDS if k in seen] + sorted(seen - set(CRITIC_KINDS))
    _stacked(ax, view, view.segment_fractions, order)
    ax.set_ylim(0, 1.0)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    _round_axis(ax, view, "share of fleet steps")


PLOTS = (
    _Plot("success_rate.png", "Closed-loop success rate per round", lambda v, r: True, _draw_success, ""),
    _Plot("throughput.png", "Fleet throughput (successes per robot-hour)",
          lambda v, r: v.robot_rate(r) is not None, _draw_throughput, "no round has fleet throughput"),
    _Plot("operator_time.png", "Operator time by role",
          lambda v, r: bool(r.fleet and r.fleet.operator_s), _draw_operator, "no round has operator time"),
    _Plot("return_on_human_effort.png", "Return on human effort (successes per operator-hour)",
          lambda v, r: v.operator_rate(r) is not None,
          _bars(lambda v, r: v.operator_rate(r), "successes per operator-hour", "tab:purple"),
          "no round has successes per operator-hour"),
    _Plot("segment_mix.png", "Critic segment kinds in the fleet data",
          lambda v, r: bool(v.segment_fractions(r)), _draw_segments, "no round has critic segments"),
    _Plot("intervention_rate.png", "Intervention rate (interventions per fleet episode)",
          lambda v, r: v.intervention_rate(r) is not None,
          _bars(lambda v, r: v.intervention_rate(r), "interventions per episode", "tab:orange", "{:.2f}"),
          "no round has fleet episodes with interventions counted"),
)  # fmt: skip


def _draw_plots(view: _View, plots_dir: Path, name: str) -> list[tuple[_Plot, Path | None]]:
    plots_dir.mkdir(parents=True, exist_ok=True)
    drawn: list[tuple[_Plot, Path | None]] = []
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


# ---------------------------------------------------------------- markdown


def _success_with_interval(result: EvalResult | None) -> str:
    if result is None:
        return "–"
    return f"{_pct(result.success_rate)} [{_pct(result.ci95[0])}, {_pct(result.ci95[1])}]"


def _round_rows(view: _View) -> list[list[str]]:
    base = view.base_throughput()
    rows = []
    for r in view.rounds:
        e, f = r.eval, r.fleet
        roles = ", ".join(f"{role} {_num(s)}" for role, s in f.operator_s.items()) if f and f.operator_s else "–"
        episodes = _num(f.episodes if f else None)
        if r.demos is not None:  # no fleet: the round's human time bought demonstrations
            roles, episodes = f"demonstrator {_num(r.demos.human_s)}", f"{_num(r.demos.episodes)} demos"
        robot = view.robot_rate(r)
        gain = f"{robot / base:.2f}×" if robot is not None and base else "–"
        rows.append([
            str(r.round), f"`{r.policy}`", _success_with_interval(e), _success_with_interval(r.final_test),
            "yes" if r.promoted else "no", f"`{r.current}`" if r.current else "–",
            episodes, _num(f.interventions if f else None), roles,
            _num(view.operator_rate(r)), _num(f.successes_per_present_hour if f else None), _num(robot), gain,
        ])  # fmt: skip
    return rows


def _data_rows(view: _View) -> list[list[str]]:
    rows = []
    for r in view.rounds:
        f, t, g = r.fleet, r.train, r.guided
        ran = view.fleet_policy[r.round]
        outcomes = ", ".join(f"{k} {v}" for k, v in f.outcomes.items()) if f and f.outcomes else "–"
        fractions = view.segment_fractions(r)
        segments = ", ".join(f"{k.replace('_', ' ')} {_pct(fractions[k])}" for k in r.segments) if fractions else "–"
        train = f"{_num(t.steps)} steps, {_duration(t.wall_s)}" if t and t.steps is not None and t.wall_s else "–"
        guided = f"{_num(g.guided_chunks)} of {_num(g.chunks)} chunks" if g else "–"
        rows.append([
            str(r.round), f"`{ran}`" if f and ran else "–", outcomes, _num(f.rewinds if f else None), segments,
            train, "–" if t is None or t.final_loss is None else f"{t.final_loss:.3g}",
            "–" if t is None or "mean" not in t.weights else f"{t.weights['mean']:.2f}",
            _pct(t.weights.get("zero_fraction") if t else None), guided,
        ])  # fmt: skip
    return rows


def _evidence(d: Decision) -> str:
    """What a decision rested on: the discordant seeds and McNemar's p, or the unpaired bound."""
    confidence = "" if d.confidence is None else f" (promoted below {1 - d.confidence:.2f})"
    if d.test == "mcnemar":
        return (
            f"on {d.shared_seeds} shared seeds the candidate alone succeeded on {d.candidate_only} and the current "
            f"alone on {d.current_only}, exact McNemar one-sided p = {d.p_value:.3g}{confidence}"
        )
    bound = "–" if d.diff_lower_bound is None else f"{100 * d.diff_lower_bound:+.1f} pp"
    at = "" if d.confidence is None else f" at {_pct(d.confidence)} confidence"
    return f"unpaired lower bound of the difference{at} {bound}"


def _decisions(view: _View) -> list[str]:
    lines = []
    previous = view.rounds[0].current or view.rounds[0].policy
    for r in view.rounds[1:]:
        verdict = f"promoted `{r.policy}`" if r.promoted else f"kept `{previous}`"
        d = r.decision
        if d is None:
            lines.append(f"- Round {r.round}: no decision recorded; {verdict}.")
        else:
            lines.append(f"- Round {r.round}: candidate `{r.policy}` {_pct(d.candidate_rate)} vs current "
                         f"`{previous}` {_pct(d.current_rate)}; {_evidence(d)} → {verdict}.")  # fmt: skip
        previous = r.current or previous
    return lines or ["- Only the base policy was evaluated; there was nothing to promote."]


def _response_rows(view: _View) -> list[list[str]]:
    rows = []
    for r in view.rounds:
        response = r.fleet.failure_response if r.fleet else {}
        if not response:
            continue
        share = response.get("rescued_in_time_share")
        seconds = [response.get(k) for k in ("onset_to_request_s_p50", "onset_to_grant_s_p50", "onset_to_grant_s_p90")]
        rows.append([
            str(r.round), _num(response.get("failures")), _num(response.get("taken_over")),
            _num(response.get("recovered_by_policy")), _num(response.get("ended_without_takeover")),
            *["never" if s is None and response.get("failures") else _num(s) for s in seconds],
            f"{_num(response.get('rescued_in_time'))} of {_num(response.get('recoverable_needing_takeover'))}"
            + (f" ({_pct(share)})" if share is not None else ""),
        ])  # fmt: skip
    return rows


def _timings(timings: dict[str, float]) -> list[str]:
    if not timings:
        return ["No timings recorded."]
    total = sum(timings.values())
    rows = [[step, _duration(s), _pct(s / total) if total > 0 else "–"] for step, s in timings.items()]
    return _table(["step", "wall time", "share"], [*rows, ["**total**", f"**{_duration(total)}**", ""]])


def _final_test_line(summary: LoopSummary) -> list[str]:
    if not summary.final_test_episodes or summary.final_test_seed is None:
        return []
    last = summary.final_test_seed + summary.final_test_episodes - 1
    return [
        f"- **final test**: {summary.final_test_episodes} episodes per policy, seeds {summary.final_test_seed}…{last}, "
        "disjoint from the promotion seeds: the figures to judge the run by"
    ]


def _markdown(summary: LoopSummary, view: _View, plots: list[tuple[_Plot, Path | None]], run_dir: Path) -> str:
    response = _response_rows(view)
    seeds = "–" if summary.eval_seed is None else f"from {summary.eval_seed}"
    if summary.eval_seed is not None and summary.eval_episodes:
        seeds = f"{summary.eval_seed}…{summary.eval_seed + summary.eval_episodes - 1}"
    lines = [
        f"# Post-training report: {summary.name}", "",
        f"- **task**: {summary.task or '–'}", f"- **method**: {summary.method or '–'}",
        f"- **evaluation** (promotion): {_num(summary.eval_episodes)} episodes per policy, seeds {seeds}",
        *_final_test_line(summary),
        f"- **rounds**: {len(view.rounds) - 1} after the base policy", "",
        "## Rounds", "",
        *_table(["round", "policy", "success (95% CI)", "final test (95% CI)", "promoted", "current after",
                 "fleet episodes",
                 "interventions", "operator s by role", "successes / operator-h", "successes / present operator-h",
                 "successes / robot-h", "throughput vs base"], _round_rows(view)),
        "", "Successes per operator-hour is the return on human effort, counting the seconds operators were busy; per "
        "present operator-hour counts every operator's whole shift (the fleet round on the sim clock), busy or "
        "watching, as a wage is paid; successes per robot-hour is throughput. "
        "Throughput vs base divides a round's robot-hour throughput by that of the first fleet that ran the base "
        "policy.", "",
        "## Data and training", "",
        *_table(["round", "fleet ran", "outcomes", "rewinds", "segment mix (share of steps)", "training", "final loss",
                 "mean weight", "zero-weight share", "guided"], _data_rows(view)),
        "", "## Operator response", "",
        *(_table(["round", "failures", "taken over", "recovered by the policy", "ended without takeover",
                  "onset → request p50 (s)", "onset → grant p50 (s)", "onset → grant p90 (s)",
                  "recoverable failures rescued in time"], response)
          if response else ["No failure response recorded."]),
        "", "A failure's onset is the first step the simulator's ground truth flags it under the policy (an injected "
        "failure, or progress falling); still recoverable means the scripted expert, started from that exact state, "
        "completes the task. A failure with no takeover counts as a wait without end (\"never\" where it decides the "
        "quantile). Sim seconds.",
        "", "## Promotion decisions", "", *_decisions(view),
        "", "## Where the time went", "", *_timings(summary.timings_s),
        "", "## Plots", "",
    ]  # fmt: skip
    skipped = []
    for plot, path in plots:
        if path is None:
            skipped.append(f"- {plot.title} (`{plot.file}`): skipped, {plot.why_skipped}.")
        else:
            lines += [f"### {plot.title}", "", f"![{plot.title}]({path.relative_to(run_dir).as_posix()})", ""]
    if skipped:
        lines += ["### Skipped plots", "", *skipped, ""]
    return "\n".join(lines)


def write_report(run_dir: Path, summary: dict) -> Path:
    """Write ``run_dir/report.md`` and its plots under ``run_dir/plots/``; return the report's path.

    Raises ``ValueError`` (a :class:`~vla_recover.config.ConfigError`) naming the field when ``summary`` does not
    match :class:`LoopSummary`, before anything is written.
    """
    run_dir = Path(run_dir)
    parsed = validate_config(LoopSummary, summary, source="loop summary")
    view = _View.of(parsed)
    rounds = [r.round for r in view.rounds]
    if len(set(rounds)) != len(rounds):
        raise ValueError(f"invalid loop summary: field 'rounds': round numbers repeat in {rounds}")
    plots = _draw_plots(view, run_dir / "plots", parsed.name)
    out = run_dir / "report.md"
    out.write_text(_markdown(parsed, view, plots, run_dir))
    return out
