"""Every rank prints: what a learner sees without a rank-0 guard, and with one.

    torchrun --nproc-per-node=2 lab/workloads/print_ranks.py [--lines 3] [--guard]
    torchrun --nproc-per-node=2 --log-dir=logs --tee=3 --local-ranks-filter=0 lab/workloads/print_ranks.py

Each line names its rank, so a count per rank can tell who printed what.
"""

import argparse

from lab.workloads.distributed import process_group, say


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=3)
    p.add_argument("--guard", action="store_true", help="print from rank 0 only (the usual fix)")
    args = p.parse_args()
    with process_group() as ctx:
        if args.guard and ctx.rank != 0:
            return
        for i in range(args.lines):
            say(f"hello from rank {ctx.rank} (local rank {ctx.local_rank}) line {i}")


if __name__ == "__main__":
    main()
