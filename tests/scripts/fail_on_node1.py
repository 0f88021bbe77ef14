"""Node 1's workers fail at once; node 0's join the process group and wait for peers that never come."""

import socket
import sys

from lab.workloads.distributed import process_group

if socket.gethostname() == "node1":
    sys.exit(3)
with process_group():
    pass
