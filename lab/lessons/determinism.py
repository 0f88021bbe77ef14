"""determinism: what stays bit-identical, and what legitimately changes, between runs.

    lab exercise run determinism

Runs the trainer (20 steps) four times: 2 hosts x 2 twice, 1 host x 4, and 1 host x 2,
and compares the exact final checksums. The verdict asserts: the repeat is bitwise
equal; 1x4 equals 2x2; 2 processes differ from 4.
"""

from lab.lessons import all_equal, checksums
from lab.topology import Topology

NAME = "determinism"
SUMMARY = "repeat runs are bitwise equal, 1x4 equals 2x2, 2 processes differ from 4"
KIND = "lesson"
COMMAND = "lab exercise run determinism"
TRAINER = ["--steps", "20", "--ckpt-every", "0"]
DEPTHS = {
    "beginner": """
Run the same job twice and you get exactly the same model. Move the same 4 copies onto
2 machines instead of 1 and you still do. Use 2 copies instead of 4 and the result
changes: each step now averages over different data.""",
    "developer": """
Reproducibility needs fixed seeds (model init, data order: DistributedSampler's seed),
deterministic kernels (on GPUs: torch.use_deterministic_algorithms) and a fixed world
size. The world size sets the global batch and which samples each rank sees, so 2 and
4 processes train different models. Where the ranks run does not matter.""",
    "researcher": """
The averaged gradient is a floating-point sum whose order the collective fixes: with the
same world size and algorithm, gloo adds the same numbers in the same order whatever
the host layout, so 1x4 and 2x2 agree to the last bit. A different world size changes
the sampler's partition, the sum's terms and its order. Resuming bit-identically also
needs DDP's rebuilt bucket order (see lab.workloads.distributed.settle_buckets).""",
}


def run(lesson) -> None:
    report = lesson.report
    runs = {
        "2x2": lesson.job("2 hosts x 2", Topology(nodes=2, nproc_per_node=2), "trainer", TRAINER),
        "2x2 again": lesson.job("2 hosts x 2, again", Topology(nodes=2, nproc_per_node=2), "trainer", TRAINER),
        "1x4": lesson.job("1 host x 4", Topology(nodes=1, nproc_per_node=4), "trainer", TRAINER),
        "1x2": lesson.job("1 host x 2", Topology(nodes=1, nproc_per_node=2), "trainer", TRAINER),
    }
    final = {}
    for name, output in runs.items():
        sums = checksums(output)
        ok = output.ok and bool(sums) and all_equal(sums.values())
        report.check(f"{name}: the job succeeded, every rank equal", ok, str(sorted(set(sums.values()))))
        final[name] = next(iter(sums.values()), None)
    report.facts["final_checksums"] = final
    report.check(
        "the same world size repeated: bitwise equal",
        final["2x2"] == final["2x2 again"],
        f"{final['2x2']} vs {final['2x2 again']}",
    )
    report.check("1 host x 4 equals 2 hosts x 2", final["1x4"] == final["2x2"], f"{final['1x4']} vs {final['2x2']}")
    report.check("2 processes differ from 4", final["1x2"] != final["2x2"], f"{final['1x2']} vs {final['2x2']}")
    report.explanation = (
        "the world size fixes the data each rank sees and the order of the gradient sum; "
        "the hosts the ranks run on do not"
    )
