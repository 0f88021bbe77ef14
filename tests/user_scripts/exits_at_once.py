"""Joins the process group and leaves at once: nothing a fault could interrupt.

torchrun --nproc-per-node=2 exits_at_once.py
"""

import torch.distributed as dist

dist.init_process_group("gloo")
print("nothing to train", flush=True)
# Leave together: gloo's init can return on one rank while the other still connects its pair,
# and a rank that tears its group down then fails the other's connectFullMesh ("Connection
# closed by peer": seen once in CI, under load).
dist.barrier()
dist.destroy_process_group()
