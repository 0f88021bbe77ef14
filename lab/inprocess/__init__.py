"""In-process recovery: the surviving ranks stay, the group is re-formed, and the lost rank is
replaced by a warm spare that takes its state from a peer.

api.py is what a training script uses (`from lab.inprocess import attempts`), with lookout, group,
handover and heartbeat beside it; what a node runs under `--recovery in-process` (the keeper,
its ranks and spares) is lab.node.inprocess."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lab.inprocess.api import Attempt, attempts

__all__ = ["Attempt", "attempts"]


def __getattr__(name: str) -> Any:
    """The API on first use: the modules beside it (heartbeat) are read by the lab's CLI, which
    must not import torch to judge a drill."""
    if name in __all__:
        from lab.inprocess import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
