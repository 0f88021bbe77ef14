"""print-from-every-rank: N copies print N times; how to tell them apart and how to quiet them.

    lab exercise run print-from-every-rank

print_ranks.py prints 3 lines from every rank. Three runs on 2 hosts x 2 processes:
unguarded (every rank prints), with a rank-0 guard, and unguarded under torchrun's
--tee=3 --local-ranks-filter=0 (torchrun prefixes each line with its local rank and
shows only local rank 0 of each node). The verdict counts each rank's lines in each run.
"""

from collections import Counter

from lab.topology import Topology

NAME = "print-from-every-rank"
SUMMARY = "every rank prints; the rank-0 guard and --local-ranks-filter/--tee, counted"
KIND = "lesson"
COMMAND = "lab exercise run print-from-every-rank"
LINES = 3
DEPTHS = {
    "beginner": """
Every copy runs every print. With 4 copies you see each message 4 times, mixed together.
The usual fix is one line: `if rank == 0: print(...)`. The lab prefixes each line with
its host, and each line here names its rank, so you can count who said what.""",
    "developer": """
Guard logging and checkpoint writes with `if dist.get_rank() == 0` (or local rank 0
for per-node work). torchrun can do it without code changes: `--tee=3` prefixes each
worker's line with `[default<local rank>]:` and `--local-ranks-filter=0` shows only
local rank 0 on the console, while `--log-dir` keeps every rank's full output in files.""",
    "researcher": """
Each worker owns its stdout; lines from different processes interleave at write()
granularity, so a print that issues two writes can be split by another rank's line
(PYTHONUNBUFFERED=1 does exactly that). The lab's workloads write each line with one
write(). torchrun's --tee redirects workers' streams to per-rank files and tails them to
the console with the prefix.""",
}


def counts(output) -> Counter:
    return Counter(int(m[1]) for m in output.matches(r"hello from rank (\d+) "))


def run(lesson) -> None:
    report = lesson.report
    topology = Topology(nodes=2, nproc_per_node=2)
    args = ["--lines", str(LINES)]
    every = counts(lesson.job("every rank prints", topology, "print_ranks", args))
    guarded = counts(lesson.job("with the rank-0 guard", topology, "print_ranks", [*args, "--guard"]))
    filtered_output = lesson.job(
        "--tee=3 --local-ranks-filter=0",
        topology.replace(torchrun_extra=("--tee=3", "--local-ranks-filter=0")),
        "print_ranks",
        args,
    )
    filtered = counts(filtered_output)
    prefixed = len(filtered_output.matches(r"\[default0\]:hello from rank"))
    report.facts.update(lines_every_rank=dict(every), lines_guarded=dict(guarded), lines_filtered=dict(filtered))
    report.check(
        f"unguarded: every rank printed its {LINES} lines", every == {r: LINES for r in range(4)}, str(dict(every))
    )
    report.check("guarded: only rank 0 printed", guarded == {0: LINES}, str(dict(guarded)))
    report.check(
        "--local-ranks-filter=0: only local rank 0 of each node (ranks 0 and 2) on the console",
        filtered == {0: LINES, 2: LINES},
        str(dict(filtered)),
    )
    report.check(
        "--tee=3 prefixed those lines with the local rank",
        prefixed == 2 * LINES,
        f"{prefixed} lines start with [default0]:",
    )
    report.explanation = "every copy runs every print; guard with the rank, or let torchrun filter and prefix"
