"""For the watcher's own test: reports steps with the lab's helper and also prints other
numbers; rank 1 raises on its third step; writes marker.txt in its working dir."""

import os

import torch.distributed as dist

from lab.progress import step

dist.init_process_group("gloo")
rank = dist.get_rank()
# The loop runs no collective: without this, rank 0 could finish and leave while rank 1 was still
# inside init_process_group, on a loaded machine (CI once), and rank 1 then failed there instead.
dist.barrier()
open(f"marker-{rank}.txt", "w").write(os.getcwd())
for i in range(5):
    print(f"epoch {100 + i}", flush=True)  # the helper's count wins over what the output says
    step(i)
    if rank == 1 and i == 2:
        raise ValueError("bad batch on purpose")
dist.destroy_process_group()
