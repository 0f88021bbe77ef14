"""The lesson's claims as exercises: each one small module, run by lab.lessons.runner.

A lesson module has NAME, SUMMARY, KIND = "lesson", COMMAND (the exact command),
DEPTHS (its explanation for a beginner, a developer and a researcher) and
run(lesson), which runs jobs and fills lesson.report.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from lab import results

MODULES = (
    "hello_ddp",
    "broadcast_at_construction",
    "no_ddp_drift",
    "forgot_torchrun",
    "print_from_every_rank",
    "same_data_every_rank",
    "buffers",
    "determinism",
    "rank_vs_local_rank",
    "bucket_size",
    "fsdp_shards",
    "set_device_first",
)


def modules() -> list[ModuleType]:
    return [importlib.import_module(f"{__name__}.{m}") for m in MODULES]


def checksums(output) -> dict[int, str]:
    """{rank: exact checksum} from the lesson scripts' `rank R ... checksum C (HEX)` lines."""
    return {r.rank: r.exact for r in results.parse(output.text, node="")}


def all_equal(values) -> bool:
    return len(set(values)) == 1


def losses(output) -> list[str]:
    return [m[1] for m in output.matches(r"step \d+ loss (\S+)")]
