"""`vla-recover fleet`: run N sim robots under (simulated) operators, recording everything into the store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from vla_recover.cli.common import console, progress_bar, user_errors

__all__ = ["fleet"]


def _live_table(summary: dict[str, Any], states: dict[str, str]) -> Table:
    table = Table(show_header=True, title="fleet")
    table.add_column("robots by state")
    table.add_column("operator s")
    table.add_column("outcomes")
    by_state: dict[str, int] = {}
    for state in states.values():
        by_state[state] = by_state.get(state, 0) + 1
    table.add_row(
        ", ".join(f"{k} {v}" for k, v in sorted(by_state.items())),
        ", ".join(f"{k} {v:.0f}" for k, v in summary["operator_s"].items()) or "0",
        ", ".join(f"{k} {v}" for k, v in summary["outcomes"].items()) or "-",
    )
    return table


def fleet(
    config: Annotated[Path, typer.Option(help="YAML config (configs/fleet/*.yaml)")],
    robots: Annotated[
        int | None, typer.Option(help="this many sim robots in place of the config's robots", min=1)
    ] = None,
    episodes: Annotated[int | None, typer.Option(help="episodes to finish (overrides the config)", min=1)] = None,
    policy: Annotated[Path | None, typer.Option(help="policy checkpoint (overrides the config)")] = None,
    store: Annotated[Path | None, typer.Option(help="episode store to append to (overrides the config)")] = None,
    remote: Annotated[
        str | None, typer.Option(help="a policy server's http://HOST:PORT instead of the config's policy")
    ] = None,
) -> None:
    """Roll a policy out on a sim fleet with simulated operators; prints the human-effort summary as JSON."""
    from vla_recover.config import load_yaml, validate_config
    from vla_recover.fleet import FleetConfig, build_fleet

    with user_errors():
        raw: dict[str, Any] = load_yaml(config)
        overrides = {"robots": robots, "episodes": episodes, "store": store}
        raw.update({k: v for k, v in overrides.items() if v is not None})
        if policy is not None:
            raw.update(policy=policy, constant_action=None, inference=None)
        if remote is not None:
            raw.update(policy=None, constant_action=None, inference={"remote": remote})
        cfg = validate_config(FleetConfig, raw, source=str(config))
        manager = build_fleet(cfg)
        with progress_bar() as progress:
            job = progress.add_task(f"fleet {len(manager.slots)}x {manager.task}", total=cfg.episodes, status="")

            def on_tick(fleet: Any) -> None:
                if fleet.ticks % 20:
                    return
                summary = fleet.ledger.summary()
                states = {robot: str(slot.state) for robot, slot in fleet.slots.items()}
                status = ", ".join(f"{k} {v}" for k, v in summary["outcomes"].items())
                progress.update(job, completed=summary["episodes"], status=status)
                if fleet.ticks % 400 == 0:
                    progress.console.print(_live_table(summary, states))

            summary = manager.run(on_tick)
            final = ", ".join(f"{k} {v}" for k, v in summary["outcomes"].items())
            progress.update(job, completed=summary["episodes"], status=final)  # the bar ends where the run did
    table = Table(title=f"fleet run → {cfg.store}", show_header=False)
    for key, value in summary.items():
        table.add_row(key, json.dumps(value) if isinstance(value, dict) else str(value))
    console.print(table)
    print(json.dumps(summary))
