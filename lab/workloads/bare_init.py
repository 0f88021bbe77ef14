"""The lesson's "forgot torchrun" mistake: a script that calls init_process_group directly.

    python lab/workloads/bare_init.py                       # fails: no RANK, WORLD_SIZE, MASTER_ADDR
    torchrun --nproc-per-node=2 lab/workloads/bare_init.py  # works

init_process_group's default, init_method="env://", reads the rank, the world size and
the rendezvous address from the environment that torchrun sets for every worker.
Plain `python` sets none of them.
"""

import sys

import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")  # reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    # One write per line: with PYTHONUNBUFFERED=1 print() writes the text and the newline
    # separately, and two ranks' lines can run together.
    sys.stdout.write(f"rank {dist.get_rank()} of {dist.get_world_size()}: process group ready\n")
    sys.stdout.flush()
    # Leave together: init_process_group returns on a rank once its own connections are up, and
    # one that left at once could close them under a peer still connecting (seen under load:
    # "connectFullMesh failed ... Connection closed by peer").
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
