"""corrupt-checkpoint: damage the newest checkpoint, then kill a worker; resume falls back.

Hypothesis: the trainer verifies every checkpoint (a sha256 over its payload) before
trusting it. When the newest one is truncated, the restarted group logs it, sets it
aside as *.bad and resumes from the previous one: it redoes up to two intervals of
steps, and still ends bit-identical to an uninterrupted run.

    lab exercise run corrupt-checkpoint [--target-rank 1] [--at-step 35]
    lab exercise run corrupt-checkpoint --parallel fsdp2 --damage no-metadata   # a DCP save cut short
    lab exercise run corrupt-checkpoint --parallel fsdp2 --damage mixed-steps   # shards of two steps

A DCP step (--parallel fsdp2, or a script's DCP folder) is a folder of shards and a
`.metadata`: `--damage truncate` cuts a shard in half; `no-metadata` removes the `.metadata`,
as a save killed before its end leaves the folder; `mixed-steps` replaces one rank's shard
with its shard of the step before, as a script that saves every step into one folder (or
moves a `latest` pointer before the save is whole) leaves it: each file whole, the step not.
The trainer's manifest (every file's size and sha256, written once the step is whole) catches
all three; a script that loads whatever the folder holds resumes from a step that never was.

The target worker is stopped (SIGSTOP) before the damage, so no newer checkpoint can be saved
between the damage and the kill, however loaded the machine.

Look for: a `checkpoint_invalid` event naming the file and "checksum mismatch" or
"truncated"; the next `checkpoint_loaded` one interval older; `step_000000NN.ckpt.bad`
in the checkpoint directory.
"""

from __future__ import annotations

import signal
from pathlib import Path

from lab.errors import LabError
from lab.exercises import drill_job, observe
from lab.exercises.drill import aimed, paced_trainer
from lab.exercises.seen import Seen
from lab.health.events import Event
from lab.options import Option
from lab.report import Report
from lab.topology import Topology
from lab.workloads.checkpoint_files import DCP_DAMAGES

NAME = "corrupt-checkpoint"
SUMMARY = "truncate the newest checkpoint and kill a worker; resume falls back to the previous one"
INJECTS = ("pause_worker", "corrupt_checkpoint", "kill_worker")  # Node faults it uses (lab.exercises.grid)
DEFAULT_TARGET_RANK, DEFAULT_AT_STEP = 1, 35
STEPS, CKPT_EVERY = 60, 10
OPTIONS = (
    Option(
        "--damage",
        "what is done to the newest checkpoint: truncate (cut in half; default), or to a DCP step "
        "(--parallel fsdp2, or your script's DCP folder) no-metadata or mixed-steps",
        "truncate",
        choices=("truncate", *DCP_DAMAGES),
    ),
)
SCRIPT_OPTIONS = ("damage",)  # your script's newest checkpoint, damaged the same way


def topology(options) -> Topology:
    return drill_job(options, max_restarts=1)


def trainer_refusal(options) -> str:
    damage = damage_of(options.own)
    if damage in DCP_DAMAGES and options.parallel != "fsdp2":
        why = "the DDP trainer saves one file: --damage truncate"
        return f"--damage {damage} damages a DCP step: add --parallel fsdp2 ({why})"
    return ""


def trainer_args(options) -> list[str]:
    return paced_trainer(STEPS, CKPT_EVERY)


def run(drill, options) -> Report:
    node, local_rank = drill.reach(options.target_rank, options.at_step)
    damage_then_kill(drill, node, local_rank, str(drill.ckpt_dir), options.target_rank, damage_of(options.own))
    return judge(drill.gather(NAME, 240, reference=trainer_args(options)), options)


def judge(seen: Seen, options) -> Report:
    report = seen.new_report()
    events, codes = seen.events, seen.codes
    damaged, kill = seen.injected("corrupt_checkpoint"), seen.injected("kill_worker")
    saved, reached, loaded = observe.checkpoint_progress(events, kill["time"])
    invalid = [e for e in events if e["event"] == Event.CHECKPOINT_INVALID]
    report.facts["damage"] = {"how": damaged["args"].get("mode", "truncate"), "path": damaged["result"]}
    report.facts["restarts"] = observe.restarts(events)
    report.facts["lost_steps"] = reached - loaded[0] if loaded else None
    report.facts["recovery"] = observe.recovery_breakdown(events, seen.agents, kill["time"])
    report.check("the job succeeded", all(c == 0 for c in codes.values()), f"exit codes {codes}")
    report.check(
        "the damaged checkpoint was detected",
        bool(invalid) and _names(invalid[0]["path"], damaged["result"]),
        invalid[0]["reason"] if invalid else "no checkpoint_invalid event",
    )
    previous = saved[-2] if len(saved) >= 2 else None
    report.check(
        "resumed from the previous checkpoint", loaded[:1] == [previous], f"saved {saved[-2:]}, loaded {loaded[:1]}"
    )
    observe.judge_reference(report, seen)
    return report


def _names(found: str, damaged: str) -> bool:
    """The invalid checkpoint is the damaged file, or the DCP step folder holding it (--parallel fsdp2)."""
    return damaged == found or Path(damaged).parent == Path(found)


SCRIPT_RECOVERY = "restart"
SCRIPT_NEEDS_CKPT_DIR = "corrupt-checkpoint on your script needs --ckpt-dir (where it writes checkpoints)"


def break_script(drill, target: int, ckpt_dir: str | None, own: dict) -> dict:
    """On a user's script (needs --ckpt-dir): damage its newest checkpoint (--damage), then
    SIGKILL the target rank's worker."""
    if ckpt_dir is None:
        raise LabError(SCRIPT_NEEDS_CKPT_DIR)
    node, local_rank = drill.locate(target)
    return damage_then_kill(drill, node, local_rank, ckpt_dir, target, damage_of(own), script=True)


def damage_of(own) -> str:
    return own.get("damage") or "truncate"


def saved_files(events: list[dict]) -> list[list[int]]:
    """The [device, inode] of each file or DCP folder a user's script saved (lab.node.user_script
    records them): the corrupt-checkpoint drill damages only those, never a copy, log or other file."""
    found = {tuple(e["file"]) for e in events if e["event"] == Event.SAVED and len(e.get("file") or ()) == 2}
    return [list(identity) for identity in sorted(found)]


def damage_then_kill(
    drill, node: str, local_rank: int, ckpt_dir: str, target: int, damage: str, script: bool = False
) -> dict:
    """Stop the worker (its peers then wait in their next collective, so no newer checkpoint
    is saved), damage the newest checkpoint (on a script: the newest file it saved itself),
    SIGKILL the stopped worker."""
    drill.inject(node, "pause_worker", local_rank=local_rank)
    saved = saved_files(drill.events()) if script else []
    drill.inject(node, "corrupt_checkpoint", directory=ckpt_dir, mode=damage, **({"saved": saved} if saved else {}))
    return aimed(drill.inject(node, "kill_worker", local_rank=local_rank, sig=int(signal.SIGKILL)), target)
