"""The loop's report: ``report.md`` with a table per round, the promotion decisions, where the time went, and PNG plots.

``write_report(run_dir, summary)`` validates the summary (the loop's ``summary.json`` as a dict) in one place, so a
malformed one fails with the field named before anything is written, then draws the plots into ``run_dir/plots/``
(`vla_recover.loop.plots`) and writes ``run_dir/report.md`` that embeds them by relative path.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from vla_recover.config import validate_config
from vla_recover.evaluate import failure_order, success_by_failure
from vla_recover.loop.plots import Plot, draw_plots
from vla_recover.loop.summary import Decision, EvalResult, LoopSummary, View

__all__ = ["LoopSummary", "write_report"]


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


# ---------------------------------------------------------------- markdown


def _success_with_interval(result: EvalResult | None) -> str:
    if result is None:
        return "–"
    return f"{_pct(result.success_rate)} [{_pct(result.ci95[0])}, {_pct(result.ci95[1])}]"


def _round_rows(view: View) -> list[list[str]]:
    base = view.base_throughput()
    rows = []
    for r in view.rounds:
        e, f = r.eval, r.fleet
        roles = ", ".join(f"{role} {_num(s)}" for role, s in f.operator_s.items()) if f and f.operator_s else "–"
        episodes = _num(f.episodes if f else None)
        if r.demos is not None:  # no fleet: the round's human time bought demonstrations
            roles, episodes = f"demonstrator {_num(r.demos.human_s)}", f"{_num(r.demos.episodes)} demos"
        if r.oracle is not None:  # no fleet and no human: the expert labelled the policy's own episodes
            roles = "none (oracle)"
            episodes = f"{_num(r.oracle.policy_episodes)} with {_num(r.oracle.branches)} expert chunks"
        robot = view.robot_rate(r)
        gain = f"{robot / base:.2f}×" if robot is not None and base else "–"
        rows.append([
            str(r.round), f"`{r.policy}`", _success_with_interval(e), _success_with_interval(r.final_test),
            "yes" if r.promoted else "no", f"`{r.current}`" if r.current else "–",
            episodes, _num(f.interventions if f else None), roles,
            _num(view.operator_rate(r)), _num(f.successes_per_present_hour if f else None),
            "–" if f is None or f.rohe is None else f"{f.rohe:.3f}", _num(robot), gain,
        ])  # fmt: skip
    return rows


def _data_rows(view: View) -> list[list[str]]:
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


def _reliability_rows(view: View) -> list[list[str]]:
    rows = []
    for r in view.rounds:
        for name, m in r.reliability.items():
            pairs = ", ".join(f"{gap}: {_pct(acc)} of {m.pairs.get(gap, 0)}" for gap, acc in m.pair_accuracy.items())
            voc = "–" if m.voc is None else f"{m.voc:.2f} over {m.voc_episodes}"
            rows.append([str(r.round), name, voc, pairs or "–", m.reference])
    return rows


def _gate_rows(view: View) -> list[list[str]]:
    rows = []
    for r in view.rounds:
        gate = r.recovery_gate
        if gate is None:
            continue
        held = gate.threshold_choice
        latency = "–" if held is None or held.latency_s_p50 is None else f"{held.latency_s_p50:+.2f} s"
        rows.append([
            str(r.round), f"{gate.fit_needs_correction} of {gate.fit_rows}", f"{gate.threshold:.2f}",
            "–" if held is None else f"{held.failures} in {held.episodes}", _pct(held.recall if held else None),
            _pct(held.precision if held else None), latency,
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


def _decisions(view: View) -> list[str]:
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


def _response_rows(view: View) -> list[list[str]]:
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


def _human_time(summary: LoopSummary, view: View) -> list[str]:
    """The loop's promoted policy beside the base and beside demonstrations bought with the same human time."""
    b = summary.baseline
    if b is None:
        return []
    tested = (lambda r: r.final_test) if b.seeds == "final_test" else (lambda r: r.eval)
    base, promoted = view.rounds[0], next(r for r in view.rounds if r.policy == (view.rounds[-1].current or "base"))
    base_rate, loop_rate = tested(base), tested(promoted)
    if base_rate is None or loop_rate is None:
        return []
    busy = sum(sum(r.fleet.operator_s.values()) for r in view.rounds if r.fleet)
    loop_gain, demo_gain = loop_rate.success_rate - base_rate.success_rate, b.test.success_rate - base_rate.success_rate
    seeds = "final-test" if b.seeds == "final_test" else "promotion"
    rows = [
        ["base policy", "–", _success_with_interval(base_rate), "–"],
        [f"`{summary.method}` after {len(view.rounds) - 1} rounds (`{promoted.policy}`)",
         f"{_duration(b.loop_human_s)} operators on shift ({_duration(busy)} busy)",
         _success_with_interval(loop_rate), f"{100 * loop_gain:+.1f} pp"],
        [f"`{b.method}`: {b.demos} demonstrations instead, one round", f"{_duration(b.human_s)} demonstrating",
         _success_with_interval(b.test), f"{100 * demo_gain:+.1f} pp"],
    ]  # fmt: skip
    if demo_gain > 0:
        verdict = f"the loop's gain is {loop_gain / demo_gain:.2f}× what the same time bought as demonstrations"
    else:
        verdict = f"demonstrations bought with the same time changed the base by {100 * demo_gain:+.1f} points"
    if b.paired is not None:
        verdict += (
            f". On the {b.paired.shared_seeds} seeds both ran, `{promoted.policy}` alone succeeded on "
            f"{b.paired.loop_only} and the demonstrations' policy alone on {b.paired.baseline_only} (exact McNemar, "
            f"one-sided p = {b.paired.p_loop_better:.3g})"
        )
    return [
        "## What the human time bought", "",
        *_table(["policy", "human time", f"success on the {seeds} seeds (95% CI)", "gain over the base"], rows),
        "", f"The operators' presence over the fleet rounds, spent instead on demonstrations by the teleoperator's "
        f"demonstrator (an episode and a reset each), fine-tuned into the base with the rounds' recipe: {verdict}.",
        "",
    ]  # fmt: skip


def _by_failure(summary: LoopSummary, view: View) -> list[str]:
    """Each policy's test split by the injected failures that fired in its episodes: where the rounds' data
    taught recovery and where demonstrations did not reach."""
    final = any(r.final_test is not None for r in view.rounds)
    tests = [(f"`{r.policy}`", r.final_test if final else r.eval) for r in view.rounds]
    b = summary.baseline
    if b is not None and (b.seeds == "final_test") == final:
        tests.append((f"`{b.method}` ({b.demos} demonstrations)", b.test))
    tables = {
        name: success_by_failure({"outcomes": t.outcomes, "failures_fired": t.failures_fired})
        for name, t in tests
        if t is not None and t.outcomes is not None and t.failures_fired is not None
    }
    split = {name: table for name, table in tables.items() if table is not None}
    if not split:
        return []
    kinds = sorted({kind for table in split.values() for kind in table}, key=failure_order)

    def cell(table: dict[str, dict[str, int]], kind: str) -> str:
        if kind not in table:
            return "–"
        won, of = table[kind]["successes"], table[kind]["episodes"]
        return f"{won}/{of} ({100 * won / of:.0f}%)"

    rows = [[name, *(cell(table, kind) for kind in kinds)] for name, table in split.items()]
    seeds = "final-test" if final else "promotion"
    return [
        "## Where the failures were", "",
        *_table(["policy", *(f"{kind}: successes" for kind in kinds)], rows),
        "", f"Each policy's episodes on the {seeds} seeds by the injected failures that fired in them (whether a "
        "failure fires depends on the phases the policy reaches, so the counts differ between policies).", "",
    ]  # fmt: skip


def _timings(timings: dict[str, float], beside: dict[str, float]) -> list[str]:
    if not timings:
        return ["No timings recorded."]
    total = sum(timings.values())
    rows = [[step, _duration(s), _pct(s / total) if total > 0 else "–"] for step, s in timings.items()]
    if not beside:
        return _table(["step", "wall time", "share"], [*rows, ["**total**", f"**{_duration(total)}**", ""]])
    rows = [[*row, _duration(beside[row[0]]) if row[0] in beside else ""] for row in rows]
    table = _table(
        ["step", "wall time", "share", "ran beside the rounds"],
        [*rows, ["**total**", f"**{_duration(total)}**", "", ""]],
    )
    note = (
        "A step that ran in the second process beside the rounds counts, as wall time, only what the run waited for "
        "it; the last column is how long it ran there."
    )
    return [*table, "", note]


def _final_test_line(summary: LoopSummary) -> list[str]:
    if not summary.final_test_episodes or summary.final_test_seed is None:
        return []
    last = summary.final_test_seed + summary.final_test_episodes - 1
    return [
        f"- **final test**: {summary.final_test_episodes} episodes per policy, seeds {summary.final_test_seed}…{last}, "
        "disjoint from the promotion seeds: the figures to judge the run by"
    ]


def _gate_section(view: View) -> list[str]:
    rows = _gate_rows(view)
    if not rows:
        return []
    return [
        "", "## The recovery gate", "",
        *_table(["round", "rows needing correction (fit)", "threshold", "held-back failures (episodes)", "recall",
                 "precision", "latency (median)"], rows),
        "", "The gate each round's policy switches its recovery head by, trained on the fleet's recorded failures; "
        "its threshold is picked on training episodes held back from the fit, where recall and precision are "
        "measured (vla_recover.recovery).",
    ]  # fmt: skip


def _markdown(summary: LoopSummary, view: View, plots: list[tuple[Plot, Path | None]], run_dir: Path) -> str:
    response = _response_rows(view)
    reliability = _reliability_rows(view)
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
                 "ROHE", "successes / robot-h", "throughput vs base"], _round_rows(view)),
        "", "Successes per operator-hour counts the seconds operators were busy; per "
        "present operator-hour counts every operator's whole shift (the fleet round on the sim clock), busy or "
        "watching, as a wage is paid; ROHE is Fleet-DAgger's return on human effort, humans/robots · successes / (1 + "
        "steps a human chose); successes per robot-hour is throughput. "
        "Throughput vs base divides a round's robot-hour throughput by that of the first fleet that ran the base "
        "policy.", "",
        "## Data and training", "",
        *_table(["round", "fleet ran", "outcomes", "rewinds", "segment mix (share of steps)", "training", "final loss",
                 "mean weight", "zero-weight share", "guided"], _data_rows(view)),
        "", "## How reliable the values were", "",
        *(_table(["round", "value", "VOC on successes (episodes)", "pairs ordered right, by steps apart",
                  "judged against"], reliability)
          if reliability else ["No value kept or weighed data in these rounds."]),
        "", "VOC: the Spearman correlation of the value with time along each successful trajectory, averaged. Pairs: "
        "states 1 and 8 steps apart on one trajectory that the value orders as the simulator's progress does "
        "(progress) or, without it, as time does on successes (time); a tie counts half. The critic is measured on "
        "the round's fleet episodes, a weighter's heads on the data they were fit to.",
        *_gate_section(view),
        "", "## Operator response", "",
        *(_table(["round", "failures", "taken over", "recovered by the policy", "ended without takeover",
                  "onset → request p50 (s)", "onset → grant p50 (s)", "onset → grant p90 (s)",
                  "recoverable failures rescued in time"], response)
          if response else ["No failure response recorded."]),
        "", "A failure's onset is the first step the simulator's ground truth flags it under the policy (an injected "
        "failure, or progress falling); still recoverable means the scripted expert, started from that exact state, "
        "completes the task. A failure with no takeover counts as a wait without end (\"never\" where it decides the "
        "quantile). Sim seconds.",
        "", *_human_time(summary, view),
        *_by_failure(summary, view),
        "## Promotion decisions", "", *_decisions(view),
        "", "## Where the time went", "", *_timings(summary.timings_s, summary.beside_s),
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
    view = View.of(parsed)
    rounds = [r.round for r in view.rounds]
    if len(set(rounds)) != len(rounds):
        raise ValueError(f"invalid loop summary: field 'rounds': round numbers repeat in {rounds}")
    plots = draw_plots(view, run_dir / "plots", parsed.name)
    out = run_dir / "report.md"
    out.write_text(_markdown(parsed, view, plots, run_dir))
    return out
