"""In-process recovery: the surviving ranks stay, the group is re-formed, the lost rank is
replaced by a warm spare that takes its state from a peer (keeper.py, worker.py)."""
