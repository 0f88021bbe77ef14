"""Every place in lab/ that opens, reads, writes or chmods a file by path is found from the code,
and each module that does so is listed here with why its paths are the lab's own (issue 52).

What a node, a container, a script or another user can write (node dirs, the events, a script's
working dir and checkpoints, report folders) goes through lab.files or lab.output_paths: no link
at any component, no FIFO, bounded, written by descriptor. A module that starts opening paths
fails this test until it says here why its paths cannot be planted, or uses lab.files."""

from __future__ import annotations

import ast
from pathlib import Path

LAB = Path(__file__).resolve().parents[1] / "lab"
CALLS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "chmod", "copyfile", "copytree", "savefig"}
SAFE_WAYS = {"files", "output_paths"}  # lab.files.read_text and the like: the one way

INSIDE_A_NODE = "runs inside a node, on the node's own files (the host never runs it on a job's files)"
PROC = "/proc and /sys, the kernel's files"
OWN = "the lab's own files, in its 0700 run dir or its own temp dir, which no job writes"
BENCH = "a bench's own results and workloads, in the folder it made"
OWN_CODE = "the lab's own source, rules and templates"
OUR_FD = "opens by descriptor with O_NOFOLLOW, itself the safe way"

WHY = {
    "lab/files.py": OUR_FD,
    "lab/ownership.py": OUR_FD,
    "lab/rundir.py": OUR_FD + "; state.json in the 0700 run dir",
    "lab/kernel_log.py": "/dev/kmsg, non-blocking",
    "lab/procs.py": PROC,
    "lab/recovery.py": PROC,
    "lab/runtimes/memory.py": PROC,
    "lab/runtimes/ports.py": PROC,
    "lab/bench/docs.py": PROC,
    "lab/bench/scale_sim.py": PROC + " (its own network namespace's TCP counters)",
    "lab/bench/ray_cluster.py": OWN + ": each Ray machine's output, in the cluster's own 0700 temp dir",
    "lab/bench/cages.py": PROC + " (cgroup controllers), and a cgroup the bench made",
    "lab/node/nodeproc.py": INSIDE_A_NODE,
    "lab/node/restart_budget.py": INSIDE_A_NODE,
    "lab/node/worker_record.py": INSIDE_A_NODE + " (its host-side reader uses lab.files)",
    "lab/node/fork_server.py": INSIDE_A_NODE,
    "lab/node/inprocess/rank.py": INSIDE_A_NODE,
    "lab/health/events.py": INSIDE_A_NODE + " (its host-side reader uses lab.files)",
    "lab/health/hang_dump.py": INSIDE_A_NODE,
    "lab/health/net_probe.py": INSIDE_A_NODE,
    "lab/health/rank_exporter.py": INSIDE_A_NODE,
    "lab/health/agent_exporter.py": INSIDE_A_NODE,
    "lab/node/faulty_saves.py": INSIDE_A_NODE + " (a script's own torch.save, in the rank, to the path it named)",
    "lab/workloads/checkpoint.py": INSIDE_A_NODE,
    "lab/workloads/checkpoint_dcp.py": INSIDE_A_NODE,
    "lab/workloads/local_shards.py": INSIDE_A_NODE,
    "lab/workloads/plain_train.py": INSIDE_A_NODE,
    "lab/bench/collectives_worker.py": INSIDE_A_NODE,
    "lab/health/prometheus.py": OWN + " (Prometheus' config and log)",
    "lab/health/prometheus_rule.py": OWN_CODE,
    "lab/exercises/traits.py": OWN_CODE,
    "lab/runtimes/docker_engine.py": OWN_CODE + " (the Dockerfile it hashes)",
    "lab/runtimes/docker_prometheus.py": OWN + ": Prometheus' config copied into the run dir",
    "lab/runtimes/etcd.py": OWN + " (etcd's log; etcd runs on the host, not in a job)",
    "lab/runtimes/userns.py": OWN + " (the namespace holder's log)",
    "lab/runtimes/k8s.py": OWN + " (the applied manifests)",
    "lab/runtimes/k8s_logs.py": OWN + ": pod logs streamed by kubectl into files the lab makes",
    "lab/runtimes/netns.py": "/etc/netns/<the lab's namespace>, root's, made by the lab",
    "lab/runtimes/misconfig.py": "/etc/netns/<the lab's namespace>, root's, made by the lab (mistakes planted there)",
    "lab/cli/watch.py": "the terminal (/dev/tty)",
    "lab/exercises/drill.py": "os.devnull, when the reader of its output went away",
    "lab/exercises/ray_logs.py": OWN + " (Ray's session, inside the lab's 0700 folder), non-blocking",
    "lab/exercises/seen.py": OWN + " (a report the lab wrote)",
    "lab/exercises/reference_cache.py": OWN + " (read through lab.files, written there too)",
    "lab/exercises/script/page.py": OWN + " (the timeline PNG the lab drew)",
    "lab/report.py": OWN + " (a figure saved through lab.files' descriptor)",
    "lab/pytest_plugin.py": OWN + " (the matrix lab ci wrote in the test's own folder)",
    "lab/soak.py": OWN + " (a developer's tool: its reports and the docs page)",
    "lab/bench/collectives.py": BENCH,
    "lab/bench/detection.py": BENCH,
    "lab/bench/diagnosis_cell.py": BENCH,
    "lab/bench/flight_recorder.py": BENCH + "; the ranks' dumps reach it only through lab.files.read_regular",
    "lab/bench/fr_trace_gloo.py": "copies in a 0700 temp dir of its own, read and written as uid 65534",
    "lab/bench/goodput.py": BENCH,
    "lab/bench/plots.py": BENCH,
    "lab/bench/recovery_styles.py": BENCH,
    "lab/bench/result.py": BENCH,
}


def path_calls(path: Path) -> list[str]:
    """'line: call' for each file call in the module that is not lab.files' or lab.output_paths'."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
        if name in CALLS and owner not in SAFE_WAYS:
            found.append(f"{node.lineno}: {owner + '.' if owner else ''}{name}()")
    return found


def test_every_module_that_opens_a_path_says_why_the_path_is_the_labs():
    found = {str(p.relative_to(LAB.parent)): path_calls(p) for p in sorted(LAB.rglob("*.py"))}
    unexplained = {module: calls for module, calls in found.items() if calls and module not in WHY}
    assert not unexplained, f"open these through lab.files, or say in WHY why no job can plant them: {unexplained}"
    stale = [module for module in WHY if not found.get(module)]
    assert not stale, f"listed, but no longer opening paths: {stale}"


def test_the_scan_sees_each_kind_of_call(tmp_path):
    """The finder itself: it must see every call kind it looks for, and pass the safe ways."""
    source = tmp_path / "m.py"
    source.write_text(
        "open(p)\nPath(p).read_text()\np.write_bytes(b'')\nos.chmod(p, 0)\nshutil.copyfile(a, b)\n"
        "fig.savefig(p)\nfiles.read_text(p, 1)\noutput_paths.append_text(p, '')\n"
    )
    assert [c.split(": ")[1] for c in path_calls(source)] == [
        "open()", "read_text()", "p.write_bytes()", "os.chmod()", "shutil.copyfile()", "fig.savefig()",
    ]  # fmt: skip
