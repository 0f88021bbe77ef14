"""broadcast-at-construction: DDP copies rank 0's weights to every rank when it wraps the model.

    lab exercise run broadcast-at-construction

broadcast_demo.py seeds each rank differently, so its layer starts different on every
rank; it prints weight[0][0] before and after wrapping in DDP. The verdict asserts that
after wrapping every rank holds rank 0's value, and that rank 1's value changed.
"""

from lab.topology import Topology

NAME = "broadcast-at-construction"
SUMMARY = "weights differ per rank before DDP and equal rank 0's after"
KIND = "lesson"
COMMAND = "lab exercise run broadcast-at-construction"
DEPTHS = {
    "beginner": """
Every copy of the script builds its own model, and random initialisation could make
them differ. DDP fixes that the moment it wraps the model: it copies rank 0's weights to
all the others, so everyone starts from the same place.""",
    "developer": """
You do not need to seed every rank identically for correctness: construction broadcasts
parameters and buffers from rank 0 (`_sync_module_states`). Seed anyway for
reproducibility of rank 0's init. Anything you do to the weights before wrapping on
ranks other than 0 (loading a checkpoint only on rank 1, say) is overwritten.""",
    "researcher": """
DistributedDataParallel.__init__ verifies parameter shapes across ranks
(_verify_param_shape_across_processes, an all-gather of shapes) and then broadcasts
the module state from rank 0 in coalesced buckets (broadcast_coalesced, 250 MB chunks).
The demo shows it on rank 1: before +0.2576 (seed 1), after rank 0's -0.0037.""",
}
LINE = r"rank (?P<rank>\d+) weight\[0\]\[0\] before DDP (?P<before>\S+) after DDP (?P<after>\S+)"


def run(lesson) -> None:
    report = lesson.report
    output = lesson.job("broadcast_demo, 2 processes", Topology(nodes=1, nproc_per_node=2), "broadcast_demo")
    values = {int(m["rank"]): (m["before"], m["after"]) for m in output.matches(LINE)}
    report.facts["weights"] = values
    report.check("both ranks reported", output.ok and sorted(values) == [0, 1], f"ranks {sorted(values)}")
    if sorted(values) == [0, 1]:
        rank0_before = values[0][0]
        report.check(
            "the ranks started different", values[0][0] != values[1][0], f"before: {values[0][0]} vs {values[1][0]}"
        )
        report.check(
            "after DDP every rank holds rank 0's weight",
            all(v[1] == rank0_before for v in values.values()),
            f"after: {[v[1] for v in values.values()]}, rank 0 before: {rank0_before}",
        )
        report.check("rank 1's weight changed", values[1][0] != values[1][1], f"{values[1][0]} -> {values[1][1]}")
    report.explanation = "DDP's constructor broadcasts rank 0's parameters and buffers to every rank"
