"""A job that joins the process group, says so, and then waits: something for teardown to stop."""

import time

from lab.workloads.distributed import process_group

with process_group() as ctx:
    print(f"rank {ctx.rank} ready on {ctx.host}", flush=True)
    time.sleep(600)
