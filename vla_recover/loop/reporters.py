"""How a loop run reports its steps: a ``StepReporter`` hears each step begin, advance and end (the CLI draws
progress bars from it; ``LineReporter`` prints one line a step for logs and benchmarks)."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["LineReporter", "SilentReporter", "StepReporter"]


class StepReporter(Protocol):
    def begin(self, step: str, total: int | None) -> None: ...
    def advance(self, completed: int, status: str = "") -> None: ...
    def end(self, step: str, result: dict[str, Any], reused: bool) -> None: ...


class SilentReporter:
    """Reports nothing: a run nobody watches."""

    def begin(self, step: str, total: int | None) -> None:
        pass

    def advance(self, completed: int, status: str = "") -> None:
        pass

    def end(self, step: str, result: dict[str, Any], reused: bool) -> None:
        pass


class LineReporter(SilentReporter):
    """One line per finished step on stdout, for logs and benchmarks where progress bars would garble the output."""

    def __init__(self, label: str) -> None:
        self.label = label

    def end(self, step: str, result: dict[str, Any], reused: bool) -> None:
        rate = result.get("success_rate")
        detail = f" success {rate:.2f} {result['ci95']}" if rate is not None else ""
        print(
            f"[{self.label}] {step}{' (reused)' if reused else ''} {result.get('wall_s', 0):.0f}s{detail}", flush=True
        )
