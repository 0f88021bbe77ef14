"""Follow one Job index's pods into the run dir: the node's log, and its events back into files.

    python -m lab.runtimes.k8s_logs --namespace NS [--context C] --index I --log FILE --events DIR

`kubectl logs` takes a pod name or a selector, not both, and ends with its pod. This
follows index I across pods: the newest pod the Job made for it, then, when that one
ends (killed, evicted, preempted), the one the Job makes next, until the Job is Complete
or Failed (or `lab down` stops it: it carries the run dir's mark). Lines of the pods'
echoed events (`@lab-event FILE JSON`, lab.health.events) go to DIR/FILE.jsonl, where
the drills read a node's progress as they do on every other runtime; the rest to FILE.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from lab.errors import LabError
from lab.health.events import split_echo
from lab.runtimes.k8s import CONTEXT, NAMESPACE
from lab.runtimes.kubectl import Kubectl

POLL_S = 2.0
TERMINAL = ("Succeeded", "Failed")


def newest_pod(kubectl: Kubectl, index: int) -> tuple[str, str] | None:
    """(name, phase) of the newest pod of the index, or None."""
    try:
        lines = kubectl.run(kubectl.index_pods(index), timeout=30).split("\n")
    except (LabError, subprocess.TimeoutExpired):
        return None
    pods = [line.split() for line in lines if line.strip()]
    return (pods[-1][0], pods[-1][1] if len(pods[-1]) > 1 else "Pending") if pods else None


def job_finished(kubectl: Kubectl) -> bool:
    try:
        conditions = kubectl.run(kubectl.job_conditions(), timeout=30).split()
    except (LabError, subprocess.TimeoutExpired):
        return False
    return "Complete" in conditions or "Failed" in conditions


def copy_lines(stream: IO[str], log: IO[str], events_dir: Path) -> None:
    events_dir.mkdir(parents=True, exist_ok=True)
    for line in stream:
        echoed = split_echo(line)
        if echoed is None:
            log.write(line)
            log.flush()
            continue
        stem, record = echoed
        with open(events_dir / f"{stem}.jsonl", "a") as f:
            f.write(record)


def follow(kubectl: Kubectl, index: int, log_path: Path, events_dir: Path) -> None:
    done_pods: set[str] = set()
    since: dict[str, str] = {}  # a running pod whose stream broke: resume from then, not from its start
    with open(log_path, "a") as log:
        while True:
            found = newest_pod(kubectl, index)
            if found and found[0] not in done_pods and found[1] != "Pending":
                pod, _ = found
                if pod not in since:
                    log.write(f"[lab] following pod {pod} (index {index})\n")
                    log.flush()
                stream = subprocess.Popen(
                    kubectl.logs(pod, since.get(pod)), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
                )
                assert stream.stdout is not None
                copy_lines(stream.stdout, log, events_dir)
                stream.wait()
                since[pod] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                state = newest_pod(kubectl, index)
                if state and state[0] == pod and state[1] in TERMINAL:
                    done_pods.add(pod)
                    log.write(f"[lab] pod {pod} ended: {state[1]}\n")
                    log.flush()
            if job_finished(kubectl) and (found is None or found[0] in done_pods):
                return
            time.sleep(POLL_S)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m lab.runtimes.k8s_logs", description=(__doc__ or "").split("\n\n")[0])
    CONTEXT.add_to(p)
    NAMESPACE.add_to(p)
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--log", type=Path, required=True)
    p.add_argument("--events", type=Path, required=True)
    args = p.parse_args(argv)
    try:
        follow(Kubectl(args.context, args.namespace), args.index, args.log, args.events)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
