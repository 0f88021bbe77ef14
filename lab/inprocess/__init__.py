"""In-process recovery: the surviving ranks stay, the group is re-formed, and the lost rank is
replaced by a warm spare that takes its state from a peer.

api.py is what a training script uses (`from lab.inprocess import attempts`); keeper.py and
rank.py are what a node runs under `lab up --recovery in-process`."""

from lab.inprocess.api import Attempt, attempts

__all__ = ["Attempt", "attempts"]
