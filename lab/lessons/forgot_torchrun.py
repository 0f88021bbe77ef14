"""forgot-torchrun: a distributed script started with plain `python`.

    lab exercise run forgot-torchrun

Runs bare_init.py (it calls init_process_group("gloo") directly) with `python`, then the
same file under torchrun. The verdict asserts that plain python fails with torch's
env:// rendezvous error, and that torchrun's copies form a group.
"""

from lab.topology import Topology

NAME = "forgot-torchrun"
SUMMARY = "the script run with plain python fails with the env:// error; torchrun fixes it"
KIND = "lesson"
COMMAND = "lab exercise run forgot-torchrun"
ENV_ERROR = "environment variable RANK expected, but not set"
DEPTHS = {
    "beginner": """
A distributed script cannot find its partners by itself: torchrun tells every copy who
it is (its rank), how many copies there are, and where to meet. Started with plain
`python`, the script has none of that and stops at once. Fix: `torchrun
--nproc-per-node=2 script.py`.""",
    "developer": """
init_process_group() defaults to init_method="env://", which reads RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT. torchrun sets them (plus LOCAL_RANK, LOCAL_WORLD_SIZE,
GROUP_RANK, TORCHELASTIC_RESTART_COUNT) for every worker. The error names the first
missing variable. The lab's workloads check RANK first and say how to start them, and
the trainer runs as one plain process when RANK is absent.""",
    "researcher": """
env:// resolves to _env_rendezvous_handler, which builds a TCPStore at
MASTER_ADDR:MASTER_PORT (under torchrun: the agent's store, or rank 0's with
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1) and yields (store, rank, world_size) to the
backend. No variables, no store, no group.""",
}


def run(lesson) -> None:
    report = lesson.report
    plain = lesson.python("plain python", "bare_init")
    with_torchrun = lesson.job("the same file under torchrun", Topology(nodes=1, nproc_per_node=2), "bare_init")
    report.check("plain python fails", not plain.ok, f"exit code {plain.codes['python']}")
    error = plain.matches(r"ValueError: (Error initializing torch.distributed using env:// rendezvous: .*)")
    report.check(
        "with the env:// rendezvous error",
        bool(error) and ENV_ERROR in error[0][1],
        error[0][1][:200] if error else "no env:// error",
    )
    ready = with_torchrun.matches(r"rank (\d+) of 2: process group ready")
    report.check(
        "under torchrun both copies join the group", with_torchrun.ok and len(ready) == 2, f"{len(ready)} of 2 ready"
    )
    report.explanation = (
        "init_process_group reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the "
        "environment; torchrun sets them. Fix: torchrun --nproc-per-node=2 script.py"
    )
