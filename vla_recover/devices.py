"""Where tensors live: ``device: auto | cpu | cuda | cuda:N | mps`` in every config that runs a network.

A config only checks the spelling (`DeviceName`, without importing torch); whether the device is there is asked when
a job starts (`resolve_device`), so a config written on a laptop validates on a GPU server and the other way round.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated

from pydantic import AfterValidator

if TYPE_CHECKING:
    import torch

__all__ = ["DEVICE_HELP", "DeviceName", "autocast", "available_devices", "resolve_device"]

_SPELLING = re.compile(r"auto|cpu|mps|cuda(:\d+)?")
DEVICE_HELP = "auto (CUDA where present, else the CPU), cpu, cuda, cuda:N or mps"


def _spelled_right(name: str) -> str:
    if not _SPELLING.fullmatch(name):
        raise ValueError(f"got {name!r}; a device is {DEVICE_HELP}")
    return name


DeviceName = Annotated[str, AfterValidator(_spelled_right)]


def available_devices() -> list[str]:
    """The devices this process can use, CPU first."""
    import torch

    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{index}" for index in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        found.append("mps")
    return found


def resolve_device(name: str, field: str = "device") -> torch.device:
    """The torch device ``name`` asks for; refused, naming it and what this machine has, where it is not here."""
    import torch

    _spelled_right(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    present = available_devices()
    if device.type == "cuda":
        wanted = device.index or 0
        if not torch.cuda.is_available() or wanted >= torch.cuda.device_count():
            raise ValueError(f"{field}: {name!r} is not available on this machine; available: {', '.join(present)}")
    elif device.type == "mps" and "mps" not in present:
        raise ValueError(f"{field}: 'mps' is not available on this machine; available: {', '.join(present)}")
    return device


@contextlib.contextmanager
def autocast(device: torch.device, bf16: bool) -> Iterator[None]:
    """bfloat16 autocast on CUDA where ``bf16`` asks for it; full precision everywhere else."""
    if bf16 and device.type == "cuda":
        import torch

        with torch.autocast("cuda", dtype=torch.bfloat16):
            yield
    else:
        yield
