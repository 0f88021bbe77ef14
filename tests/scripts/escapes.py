"""A job that leaves something behind the way daemons do: a child in a session of its own,
with a clean environment (no lab mark), that outlives the script."""

import subprocess
import sys

marker = sys.argv[1]  # a unique sleep length, to find it among the machine's processes
subprocess.Popen(["env", "-i", "sleep", marker], start_new_session=True)
print(f"left sleep {marker} behind", flush=True)
