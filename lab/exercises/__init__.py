"""Exercises, one module each, found by name: the fault drills here, the lesson's in lab.lessons."""

from __future__ import annotations

import importlib

from lab.errors import LabError

MODULES = (
    "kill_worker", "kill_node", "kill_rendezvous_host", "hang_rank", "partition_node",
    "straggler", "preempt", "corrupt_checkpoint", "collective_mismatch",
)


def load(name: str):
    """The exercise module called `name` (e.g. kill-worker)."""
    exercises = all_exercises()
    if name not in exercises:
        raise LabError(f"unknown exercise {name!r}; choose one of: {', '.join(exercises)}")
    return exercises[name]


def all_exercises() -> dict:
    from lab import lessons

    modules = [importlib.import_module(f"lab.exercises.{m}") for m in MODULES]
    modules += [importlib.import_module(f"lab.lessons.{m}") for m in lessons.MODULES]
    return {m.NAME: m for m in modules}


def kind(module) -> str:
    """"drill" (breaks one running job) or "lesson" (runs small jobs and compares them)."""
    return getattr(module, "KIND", "drill")
