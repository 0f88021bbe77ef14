"""In-process recovery, the node's side: what a node runs under `--recovery in-process` instead
of torchrun's agent.

    keeper       a node's ranks and its warm spare; re-forms the group when a rank is lost
    rank         a rank, or a spare waiting to become one
    forked       ranks and spares forked from the node's fork server, torch loaded
    roll_call    the keepers' beats through the job's store: a lost keeper is seen
    rounds       a restart of every rank from the checkpoint, when in-process cannot recover
    fallback     a node lost whole, or a rank hung in Python: the keepers' way back
    node_health  what a keeper reports of its node

What a training script imports (`attempts()`, and what an attempt does when its group breaks)
stays in lab.inprocess, below the workloads.
"""
