"""Soak: run fault drills back to back in one `lab` process, then count what is left.

    python -m lab.soak --cycles kill-worker=20 kill-node=5 docker:kill-node=5 --markdown docs/reliability.md

Each cycle is a whole drill (`lab exercise run NAME`, in this process, its own run dir):
bring the lab up, break it, judge it, tear it down. Before the first and after the last,
the soak takes a census of everything a lab could leak (processes, network namespaces,
links, iptables rules, containers, networks, listening ports, this process's open file
descriptors, files in the temp dir, /etc/netns and /dev/shm) and reports the difference.
`make soak` runs the full version; the test suite runs two cycles.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab import files, procs
from lab.runtimes import netns


def census() -> dict[str, int]:
    """How many of each kind of thing that a lab could leave behind exist now."""

    def lines(*argv: str) -> int:
        if shutil.which(argv[0]) is None:
            return 0
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
        except subprocess.TimeoutExpired:
            return -1
        return len([line for line in out.splitlines() if line.strip()])

    found = {
        "processes": len(procs.marked_pids()) + lines("pgrep", "-f", "raylet|gcs_server"),
        "namespaces": len(netns._lab_namespaces(None)),
        "links": len(netns._lab_links(None)),
        "iptables rules": lines("iptables", "-w", "30", "-S") + lines("iptables", "-w", "30", "-t", "nat", "-S"),
        "listening ports": lines("ss", "-ltnH"),
        **open_fds(),
        "files in the temp dir": len(os.listdir(tempfile.gettempdir())),
        "files in /etc/netns": len(os.listdir("/etc/netns")) if os.path.isdir("/etc/netns") else 0,
        "files in /dev/shm": len(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else 0,
    }
    docker_ok = (
        shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    )
    found["containers"] = lines("docker", "ps", "-aq") if docker_ok else 0
    found["networks"] = lines("docker", "network", "ls", "-q") if docker_ok else 0
    return found


# What Ray's driver, running inside the lab process for the drills, keeps after ray.shutdown():
# its event loops, sockets and its (deleted) session logs. Counted apart: see docs/reliability.md.
RAY_FD = re.compile(r"anon_inode:\[(eventpoll|eventfd|timerfd)\]|socket:|/tlab-ray-")


def open_fds() -> dict[str, int]:
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass  # the one listdir itself opened, closed by now
    ray = sum(1 for t in targets if RAY_FD.search(t))
    return {"open fds (lab process)": len(targets) - ray, "open fds held by Ray's driver (not judged)": ray}


NOT_JUDGED = {"open fds held by Ray's driver (not judged)"}


def run_cycle(runtime: str, drill: str, work: Path, index: int) -> dict:
    """One drill in this process, with its own run dir; its verdict, how it recovered, lost steps."""
    from lab.cli import main

    run_dir, report_dir = work / f"run-{index}", work / f"report-{index}"
    argv = ["exercise", "run", drill, "--runtime", runtime, "--run-dir", str(run_dir), "--report-dir", str(report_dir)]
    output = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        code = main(argv)
    report_file = report_dir / "report.json"
    report = json.loads(report_file.read_text()) if report_file.exists() else {}
    return {
        "runtime": runtime,
        "drill": drill,
        "exit": code,
        "verdict": report.get("verdict", "error"),
        "style": (report.get("recovery_style") or {}).get("style"),  # lab.recovery: in-process, restart, ...
        "recoveries": report.get("restarts", report.get("replacements")),  # restarts, or ranks replaced in-process
        "recovery_s": rounded((report.get("recovery") or {}).get("total")),  # the kill to the first step after it
        "lost_steps": report.get("lost_steps"),
        "reference": report.get("reference"),  # "ran", or "cached" (lab.exercises.reference_cache)
        "seconds": round(time.monotonic() - started, 1),
        "error": "" if report else output.getvalue().strip().splitlines()[-1:],
    }


def rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def soak(plan: list[tuple[str, str, int]], work: Path, log=print) -> dict:
    """Every cycle, then the census. Leaks are judged from after the first cycle (which warms
    caches that stay, a plotting font say) to after the last; what changed over the first
    is reported too."""
    before = census()
    cycles: list[dict] = []
    warm = None
    total = sum(n for _, _, n in plan)
    for runtime, drill, count in plan:
        for _ in range(count):
            result = run_cycle(runtime, drill, work, len(cycles))
            cycles.append(result)
            log(
                f"[{len(cycles)}/{total}] {runtime} {drill}: {result['verdict']} ({result['style']}: recoveries "
                f"{result['recoveries']}, recovered in {result['recovery_s']} s, lost steps {result['lost_steps']}, "
                f"{result['seconds']} s)"
            )
            if warm is None:
                warm = census()
    after = census()
    warm = warm or before
    leaked = {k: after[k] - warm[k] for k in warm if after[k] != warm[k] and k not in NOT_JUDGED}
    return {
        "plan": [list(p) for p in plan],
        "cycles": cycles,
        "before": before,
        "after_first": warm,
        "after": after,
        "leaked": leaked,
    }


def markdown(result: dict, command: str) -> str:
    rows = [
        "| runtime | fault | recovery | cycles | survived | lost steps (min-max) | recovery s (median, max) "
        "| seconds a cycle (median) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for runtime, drill, _ in result["plan"]:
        mine = [c for c in result["cycles"] if c["runtime"] == runtime and c["drill"] == drill]
        lost = [c["lost_steps"] for c in mine if c["lost_steps"] is not None]
        took = sorted(c["recovery_s"] for c in mine if c.get("recovery_s") is not None)
        seconds = sorted(c["seconds"] for c in mine)
        styles = ", ".join(sorted({str(c.get("style")) for c in mine}))
        rows.append(
            f"| {runtime} | {drill} | {styles} | {len(mine)} | {sum(c['verdict'] == 'pass' for c in mine)} | "
            f"{f'{min(lost)}-{max(lost)}' if lost else 'n/a'} | "
            f"{f'{took[len(took) // 2]:.2f}, {took[-1]:.2f}' if took else 'n/a'} | "
            f"{seconds[len(seconds) // 2] if seconds else 'n/a'} |"
        )
    census_rows = [
        "| what | before | after cycle 1 | after the last | leaked (last - cycle 1) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for key, value in result["before"].items():
        first, last = result["after_first"][key], result["after"][key]
        census_rows.append(f"| {key} | {value} | {first} | {last} | {last - first} |")
    return "\n".join(
        [
            f"Command: `{command}`",
            "",
            *rows,
            "",
            "What existed before, after the first cycle and after the last:",
            "",
            *census_rows,
            "",
        ]
    )


def parse_plan(items: list[str]) -> list[tuple[str, str, int]]:
    plan = []
    for item in items:
        what, _, count = item.partition("=")
        runtime, _, drill = what.rpartition(":")
        if not count.isdigit() or int(count) < 1 or not drill:
            raise SystemExit(f"lab.soak: error: --cycles takes [RUNTIME:]DRILL=N, got {item!r}")
        plan.append((runtime or "local", drill, int(count)))
    return plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.soak", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cycles",
        nargs="+",
        default=["kill-worker=20", "kill-node=5", "docker:kill-node=5"],
        help="[RUNTIME:]DRILL=N ... (default %(default)s)",
    )
    parser.add_argument("--json", help="write the whole result here")
    parser.add_argument("--markdown", help="write the tables into this file, between the section's markers")
    parser.add_argument(
        "--section", default="soak", help="the markers' name: <!-- NAME:start --> ... <!-- NAME:end -->"
    )
    args = parser.parse_args(argv)
    plan = parse_plan(args.cycles)
    with tempfile.TemporaryDirectory(prefix="lab-soak-") as work:
        result = soak(plan, Path(work))
    command = "python -m lab.soak --cycles " + " ".join(args.cycles)
    text = markdown(result, command)
    print("\n" + text)
    if args.json:
        files.write_text(Path(args.json), json.dumps(result, indent=2) + "\n")
    if args.markdown:
        write_between_markers(Path(args.markdown), text, args.section)
    survived = all(c["verdict"] == "pass" for c in result["cycles"])
    return 0 if survived and not result["leaked"] else 1


def write_between_markers(path: Path, text: str, section: str = "soak") -> None:
    start, end = f"<!-- {section}:start -->", f"<!-- {section}:end -->"
    page = path.read_text() if path.exists() else f"{start}\n{end}\n"
    head, _, rest = page.partition(start)
    _, _, tail = rest.partition(end)
    files.write_text(path, f"{head}{start}\n{text}{end}{tail}")


if __name__ == "__main__":
    sys.exit(main())
