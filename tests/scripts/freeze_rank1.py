"""Rank 1 freezes itself (SIGSTOP) in the first round; rank 0 fails a second later. The
second round finishes at once. What the agent does between the two is the test."""

import os
import signal
import sys
import time

if int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) == 0:
    if os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(1)
    sys.exit(3)
print(f"rank {os.environ['RANK']} finished the second round", flush=True)
