"""Fast deep copies of the plain data that sim states are made of."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

__all__ = ["plain_copy"]


def plain_copy(value: Any) -> Any:
    """A deep copy of plain data (dicts, lists, tuples, arrays, scalars), several times faster than `copy.deepcopy`.

    Sim state is captured every step for rewinds, so this is on the fleet's hot path.
    """
    if isinstance(value, dict):
        return {key: plain_copy(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(plain_copy(item) for item in value)
    if isinstance(value, np.ndarray):
        return value.copy()
    if value is None or isinstance(value, int | float | str | bool | np.generic):
        return value
    return copy.deepcopy(value)
