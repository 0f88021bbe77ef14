"""A job that joins the process group, says so, and then waits: something for teardown to stop."""

import time

from lab.workloads.distributed import process_group, say

with process_group() as ctx:
    say(f"rank {ctx.rank} ready on {ctx.host}")
    time.sleep(600)
