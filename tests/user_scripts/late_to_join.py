"""An in-process script whose last rank comes to its first group late, later than the collectives'
timeout (a slow start: a cold container, a slow import, a loaded machine after a round restarts
every rank). tests/test_keeper_fallback.py runs it under the keepers.

    late_to_join.py LATE_S OUT_DIR     # each rank writes OUT_DIR/rankN: the all-reduce's sum
"""

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from lab.inprocess.api import attempts

late_s, out = float(sys.argv[1]), Path(sys.argv[2])
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if rank == world - 1:
    time.sleep(late_s)
for attempt in attempts():
    with attempt:
        total = torch.ones(1)
        dist.all_reduce(total)
        (out / f"rank{rank}").write_text(f"{total.item():g}\n")
