"""The lesson's "forgot torchrun" mistake: a script that calls init_process_group directly.

    python lab/workloads/bare_init.py                       # fails: no RANK, WORLD_SIZE, MASTER_ADDR
    torchrun --nproc-per-node=2 lab/workloads/bare_init.py  # works

init_process_group's default, init_method="env://", reads the rank, the world size and
the rendezvous address from the environment that torchrun sets for every worker.
Plain `python` sets none of them.
"""

import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")  # env:// : RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}: process group ready", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
