"""The in-process keeper ends on SIGTERM wherever the signal lands, its children with it.

The case that once hung a bench trial for over 60 s: the signal lands while Popen.poll() is
reaping a child that just exited, inside the region that holds that Popen's wait lock. A
keeper that stopped its children from the signal handler then waited on that lock forever.
The keeper here is real, in a process of its own; its ranks are small stand-in processes
(`true`, `sleep`), and the signal is sent from inside Popen's reaping (CPython's
Popen._handle_exitstatus), which is where it must land to show the hang.
"""

import os
import subprocess
import sys
import textwrap

from conftest import REPO

KEEPER = textwrap.dedent(
    """
    import argparse, os, signal, subprocess, sys
    from lab.node.inprocess import keeper as k

    args = argparse.Namespace(store="-", node_rank=0, nodes=1, nproc_per_node=2, events_dir=None, script=["-"])
    args.max_replacements = 3
    keeper = k.Keeper(args, store=None)
    argvs = iter([["true"], ["sleep", "600"], ["sleep", "600"]])  # rank 0 finishes at once
    keeper._start = lambda extra, env: subprocess.Popen(next(argvs), preexec_fn=k.die_with_parent)

    reap = subprocess.Popen._handle_exitstatus
    def reap_under_sigterm(self, *a, **kw):  # the signal arrives while the wait lock is held
        subprocess.Popen._handle_exitstatus = reap
        os.kill(os.getpid(), signal.SIGTERM)
        return reap(self, *a, **kw)
    subprocess.Popen._handle_exitstatus = reap_under_sigterm
    code = k.run_until_stopped(keeper)
    print(" ".join(str(p.pid) for p in [*keeper.ranks.values(), keeper.spare[1]]), flush=True)
    sys.exit(code)
    """
)


def test_a_sigterm_that_lands_while_a_child_is_reaped_still_ends_the_keeper_and_its_children():
    done = subprocess.run([sys.executable, "-c", KEEPER], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert done.returncode == 128 + 15, done.stdout + done.stderr
    for pid in map(int, done.stdout.split()):
        assert not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split()[2]
