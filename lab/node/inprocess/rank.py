"""One rank of an in-process-recovery job, or a warm spare waiting to become one.

    python -m lab.node.inprocess.rank [--spare KEY] SCRIPT [ARGS...]

The keeper (lab.node.inprocess.keeper) starts one per rank, with RANK, LOCAL_RANK, WORLD_SIZE and
LAB_INPROCESS_STORE set, and one spare per node. Every one imports torch and the installed
modules the script imports at its top level (import_what_the_script_imports) before the script
runs, so before it joins its group: the join waits for a late rank as long as a rendezvous waits for a node, while
its peers' first collective after the join waits only the process-group timeout (cold ranks of
a round that imported torch._dynamo after the join were more than 4 s late to it under load).
A spare then connects to the store and waits for 'RANK,LOCAL_RANK,GENERATION[,fresh]' under
KEY: the seconds a fresh process would spend are spent before anyone needs them. A spare
replaces a lost rank among survivors, or (fresh) starts as at the job's start, in a restart of
the whole group (lab.node.inprocess.rounds). Either way the script then runs as `__main__`, as
`python SCRIPT ARGS` would run it, in this process (runpy): its exit status is this process's.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import runpy
import site
import sys
import sysconfig
import time
from datetime import timedelta

import torch  # noqa: F401  -- the reason a spare exists: imported before it is needed
import torch.distributed as dist
import torch.nn  # noqa: F401
import torch.optim  # noqa: F401

from lab.inprocess import heartbeat
from lab.node.quick_exit import exit_now
from lab.nodeenv import NodeEnv


def import_what_the_script_imports(script: str) -> None:
    """A rank's head start: the installed modules the script imports at its top level, and
    torch._dynamo (an optimizer's constructor imports it: 0.8 s here). One that fails to import
    is left for the script to fail on, in its own words. The user's own modules are left for the
    script to import too: one may read RANK as it loads, which a spare does not know yet."""
    try:
        tree = ast.parse(open(script, encoding="utf-8").read())
    except (OSError, SyntaxError, ValueError):
        return
    names = ["torch._dynamo"]
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    for name in names:
        if not installed(name):
            continue
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 -- the script reports its own import errors
            pass


def installed(name: str) -> bool:
    """Whether the module comes with Python or an installed package (the standard library, a
    site-packages folder), found without running it: not one of the user's own."""
    try:
        spec = importlib.util.find_spec(name.partition(".")[0])
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    if spec.origin in ("built-in", "frozen"):
        return True
    places = [p for p in (spec.origin, *(spec.submodule_search_locations or [])) if p]  # a namespace: no origin
    return bool(places) and all(os.path.realpath(p).startswith(INSTALLED) for p in places)


LIBRARIES = ("stdlib", "platstdlib", "purelib", "platlib")  # sysconfig's names for where modules are installed
INSTALLED = tuple(
    os.path.join(os.path.realpath(path), "")
    for path in {*map(sysconfig.get_paths().get, LIBRARIES), *site.getsitepackages(), site.getusersitepackages()}
    if path
)


# A spare waits in the store's own wait, which wakes the moment its key is set and sleeps
# meanwhile, where a check every 5 ms kept the spare and the store's server (node 0's keeper)
# busy for as long as the job ran. A spare may wait longer than any timeout, so the wait is
# renewed; each lapse leaves one line of torch's in the node's log.
ASSIGNMENT_WAIT_S = 600.0


def wait_for_assignment(key: str) -> list[str] | None:
    """A spare's wait for 'RANK,LOCAL_RANK,GENERATION[,fresh]' under key; None once the store is gone."""
    wire = NodeEnv.parse()
    host, _, port = (wire.inprocess_store or "").rpartition(":")
    try:
        store = dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=60))
        while True:
            asked = time.monotonic()
            try:
                store.wait([key], timedelta(seconds=ASSIGNMENT_WAIT_S))
                return store.get(key).decode().split(",")
            except dist.DistStoreError:
                if time.monotonic() - asked < ASSIGNMENT_WAIT_S / 2:
                    return None  # not the wait lapsing: the store is gone
    except (dist.DistNetworkError, RuntimeError):
        return None


def main(argv: list[str]) -> int:
    beat_fd = NodeEnv.parse().inprocess_beat_fd
    if beat_fd is not None:  # torch is imported by now: from here on, silence means frozen
        heartbeat.start_beating(beat_fd)
    spare = argv[:1] == ["--spare"]
    script = argv[2:3] if spare else argv[:1]
    if script:
        # As `python SCRIPT` puts it first: the script's own modules, not same-named others.
        sys.path.insert(0, os.path.dirname(os.path.abspath(script[0])))
        import_what_the_script_imports(script[0])
    if spare:
        assignment = wait_for_assignment(argv[1])
        if assignment is None:
            return 0  # the job ended (its store with it) before this spare was needed
        rank, local_rank, generation, *fresh = assignment
        os.environ.update(RANK=rank, LOCAL_RANK=local_rank)
        if not fresh:  # a replacement: Attempt.replacement, it takes its state from a peer
            os.environ.update(NodeEnv(inprocess_generation=int(generation)).render())
        os.environ["TORCHELASTIC_RESTART_COUNT"] = generation
        argv = argv[2:]
    if not argv:
        print("lab.node.inprocess.rank: error: no script given", file=sys.stderr)
        return 2
    sys.argv = list(argv)
    try:
        runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:
        if isinstance(e.code, int) or e.code is None:
            return e.code or 0
        print(e.code, file=sys.stderr)  # what the interpreter prints for SystemExit("...")
        return 1
    return 0


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))  # the keeper waits on us: no interpreter teardown (quick_exit says why)
