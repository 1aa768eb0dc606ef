"""What every command shares: the console, and turning bad input into a clear message and exit code 2."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from vla_recover.config import ConfigError
from vla_recover.fleet.worker import WorkerCrashLoop
from vla_recover.hardware.robot import RobotError
from vla_recover.registry import UnknownNameError
from vla_recover.serving.client import ServerError

__all__ = ["console", "progress_bar", "user_errors"]

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


@contextmanager
def user_errors() -> Iterator[None]:
    """Bad configs, names and values end the command with their message, not a traceback."""
    try:
        yield
    except (ConfigError, UnknownNameError, ValueError, FileNotFoundError, FileExistsError, NotADirectoryError,
            IsADirectoryError, PermissionError,  # a path the user gave that cannot be used
            RobotError,  # an arm the config names that cannot be reached
            WorkerCrashLoop,  # a robot whose worker dies at every restart
            ServerError) as exc:  # fmt: skip  # a policy server that cannot be reached or refuses the requests
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(code=2) from None


def progress_bar() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
