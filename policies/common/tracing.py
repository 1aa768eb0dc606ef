"""Sampling through TorchScript traces of a policy's generators: the same weights, without Python's overhead.

A small denoising network's pass on the CPU is mostly Python: the quickstart's 1-D U-Net makes ~180 module calls a
pass. Traced, its flow policy plans a chunk in 13.5 ms instead of 31 at batch 1, 42 instead of 60 at batch 12
(`python benchmarks/policy_speed.py --down-dims 32 64 128 --state-dim 19 --threads 1 --no-compile`), so the fleet's
control loop, evaluation and the robot node plan faster on the trace. ``torch.compile`` removes the overhead too,
but compiles for a minute or more per batch shape on a small CPU and again for each new one (the fleet's batches
change size every tick), where a trace takes milliseconds and serves every batch size. TorchScript is in
maintenance in PyTorch: the choice is revisited when ``torch.export``'s runtime is as fast.

A trace is made at a network's first call, from that call's own inputs (so their dtypes and shapes are the real
ones), and kept only if it reproduces the eager network on a batch of another size; otherwise the network stays
eager. The trace shares the module's parameter tensors, so weights loaded or updated in place after it reach it;
`untrace` (called by `Policy.train`) gives the module its own forward back.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import torch
from torch import nn

__all__ = ["is_traced", "trace_on_first_call", "untrace"]

_log = logging.getLogger(__name__)

# a trace that differs from the eager network by more than float rounding at another batch size is not used
_TOLERANCE = 1e-4


def trace_on_first_call(network: nn.Module) -> None:
    """Make ``network`` (called as ``network(*batched_tensors)``) run through a trace of itself from its next call
    on; a network already set up this way is left as it is."""
    if "forward" in vars(network):
        return

    def first_call(*inputs: torch.Tensor) -> Any:
        if network.training:  # a trace is for sampling; training (dropout and all) runs the module itself
            return type(network).forward(network, *inputs)
        untrace(network)  # the trace records the module's own forward
        traced = _checked_trace(network, inputs)
        if traced is None:
            return network(*inputs)
        object.__setattr__(network, "forward", traced)  # an instance attribute: not registered as a submodule
        return traced(*inputs)

    object.__setattr__(network, "forward", first_call)


def untrace(network: nn.Module) -> None:
    """``network`` runs its own forward again."""
    vars(network).pop("forward", None)


def is_traced(network: nn.Module) -> bool:
    """Whether ``network`` runs through a trace now (false before its first call and where the trace was refused)."""
    return isinstance(vars(network).get("forward"), torch.jit.ScriptModule)


def _checked_trace(network: nn.Module, inputs: tuple[torch.Tensor, ...]) -> torch.jit.ScriptModule | None:
    """A trace of ``network`` on ``inputs``, or None where the trace does not reproduce the network on a batch one
    row longer (a shape taken as a constant) or cannot be made."""
    detached = tuple(x.detach() for x in inputs)
    longer = tuple(torch.cat([x, x[:1]]) for x in detached)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TracerWarnings on shape reads; the check below decides
            traced = torch.jit.trace(network, detached, check_trace=False)
            difference = (traced(*longer) - network(*longer)).abs().max().item()
    except (RuntimeError, TypeError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[-1]  # TorchScript's errors end with the cause, after a traceback
        _log.warning("%s stays eager: its trace failed: %s", type(network).__name__, reason)
        return None
    if not difference <= _TOLERANCE:
        name = type(network).__name__
        _log.warning("%s stays eager: its trace differs by %.3g at another batch size", name, difference)
        return None
    return traced
