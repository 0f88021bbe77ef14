"""kill-in-save: SIGKILL a rank while its checkpoint is half written; the restart loads a whole one.

Hypothesis: a save is not atomic unless the script makes it so. Storage that stalls (a busy
filer, a throttled bucket) holds a save half written for seconds, and a rank killed then leaves
what it had written. A careful job writes each step under a temporary name and makes it a
checkpoint only once it is whole (a rename, DCP's manifest and rename: lab/workloads/checkpoint.py
and checkpoint_dcp.py), so the restarted group never sees the half: it loads the newest whole
step, loses at most one interval, and ends bit-identical to an uninterrupted run.

    lab exercise run kill-in-save [--at-step 25]                    # rank 0 writes the DDP trainer's file
    lab exercise run kill-in-save --parallel fsdp2 --target-rank 1  # a DCP step's shards, not committed
    lab exercise run kill-in-save --script train.py -- ARGS         # rank 0's next torch.save or dcp.save

The fault: at --at-step the target rank is told (SIGRTMIN+8, lab.health.injected_error) that its
next save stops midway for PAUSE_S; it announces the pause (`save_paused`, with the path), and
the drill kills it inside. Midway is half the file's bytes (the trainer's DDP file, a script's
torch.save to a path), or a DCP step's files written and not committed (the trainer's shards;
a script's dcp.save before its `.metadata`, on rank 0, DCP's coordinator: lab.node.faulty_saves).
A script that writes its checkpoint straight to its final name, or moves a `latest` marker before
the save it names is whole, then loads the half on restart: the verdict names the file.

Look for: `save_paused` then the kill within PAUSE_S; after the restart, `checkpoint_loaded`
(a script's `loaded`) naming a step saved whole, never the path that was cut.
"""

from __future__ import annotations

import signal
import time

from lab.errors import LabError
from lab.exercises import drill_job, observe
from lab.exercises.drill import aimed, paced_trainer
from lab.exercises.seen import Seen
from lab.health import injected_error
from lab.health.events import Event
from lab.report import Report
from lab.topology import Topology

NAME = "kill-in-save"
SUMMARY = "SIGKILL a rank while its checkpoint is half written; the restart loads the newest whole one"
INJECTS = ("kill_worker",)  # Node faults it uses (lab.exercises.grid): the pause's signal, then SIGKILL
DEFAULT_TARGET_RANK, DEFAULT_AT_STEP = 0, 25
STEPS, CKPT_EVERY = 60, 10
SAVE_WAIT_S = 120.0  # for the target's next save to begin (a script's epoch may be long)


def topology(options) -> Topology:
    return drill_job(options, max_restarts=1)


def trainer_refusal(options) -> str:
    if options.parallel == "ddp" and options.target_rank != 0:
        return (
            f"kill-in-save cuts the save of the rank it kills: the DDP trainer's checkpoint is one file, "
            f"written by rank 0 (every rank writes its shard with --parallel fsdp2); drop --target-rank "
            f"{options.target_rank}"
        )
    return ""


def trainer_args(options) -> list[str]:
    return paced_trainer(STEPS, CKPT_EVERY)


def run(drill, options) -> Report:
    drill.reach(options.target_rank, options.at_step)
    cut_a_save(drill, options.target_rank)
    return judge(drill.gather(NAME, 240, reference=trainer_args(options)), options)


def cut_a_save(drill, target: int) -> dict:
    """Tell the target its next save pauses midway, wait for the pause, SIGKILL it inside."""
    node, local_rank = drill.locate(target)
    told = time.time()
    drill.inject(node, "kill_worker", local_rank=local_rank, sig=int(injected_error.PAUSE_SIGNAL))
    deadline, look = time.monotonic() + SAVE_WAIT_S, time.monotonic() + 1.0
    drill.progress(f"waiting for rank {target}'s next save to pause midway")
    while not (paused := pauses(drill.events(), target, told)):
        if time.monotonic() > deadline:
            raise LabError(
                f"rank {target} began no save in {SAVE_WAIT_S:.0f} s: kill-in-save cuts a torch.save(obj, PATH) "
                "or a dcp.save (before its .metadata, which rank 0 writes): choose a rank that saves (--target-rank)"
            )
        if time.monotonic() > look:  # once a second: a job that ended will save nothing more
            look = time.monotonic() + 1.0
            if (codes := drill.ended()) is not None:
                raise LabError(f"the job ended (exit codes {codes}) before rank {target}'s next save began")
        time.sleep(0.02)
    node, local_rank = drill.locate(target)
    drill.progress(f"rank {target}'s save of {paused[0]['path']} paused midway")
    return aimed(drill.inject(node, "kill_worker", local_rank=local_rank, sig=int(signal.SIGKILL)), target)


def pauses(events: list[dict], rank: int, since: float) -> list[dict]:
    """The rank's saves paused midway since the time given, oldest first."""
    return [e for e in events if e["event"] == Event.SAVE_PAUSED and e["rank"] == rank and e["time"] >= since]


def the_kill(seen: Seen) -> dict:
    """The SIGKILL (the drill's first kill_worker is the pause's signal)."""
    return next(f for f in seen.faults if f["fault"] == "kill_worker" and f["args"].get("sig") == signal.SIGKILL)


def judge(seen: Seen, options) -> Report:
    report = seen.new_report()
    kill = the_kill(seen)
    cut = check_cut(report, seen)
    observe.judge_restart_resume(report, seen, kill["time"], CKPT_EVERY)
    loaded = sorted(
        {e["path"] for e in seen.events if e["event"] == Event.CHECKPOINT_LOADED and e["time"] > kill["time"]}
    )
    report.check(
        "no rank loaded the save the kill cut",
        bool(loaded) and cut is not None and cut["path"] not in loaded,
        f"cut: {cut['path'] if cut else None}; loaded: {loaded}",
    )
    return report


def check_cut(report: Report, seen: Seen) -> dict | None:
    """The check that the kill landed inside the target's paused save; that save's record."""
    told, kill = seen.injected("kill_worker")["time"], the_kill(seen)
    paused = pauses(seen.events, kill["rank"], told)
    cut = paused[0] if paused else None
    report.facts["cut"] = {"step": cut.get("step"), "path": cut["path"]} if cut else None
    inside = cut is not None and cut["time"] <= kill["time"] <= cut["time"] + injected_error.PAUSE_S
    report.check(
        f"rank {kill['rank']} was killed with its save half written",
        inside,
        f"its save of {cut['path']} paused {cut['time'] - told:.2f} s after the signal, the kill came at "
        f"{kill['time'] - told:.2f} s (the pause lasts {injected_error.PAUSE_S:g} s)"
        if cut
        else f"no save of rank {kill['rank']} paused after the signal",
    )
    return cut


SCRIPT_RECOVERY = "restart"


def break_script(drill, target: int, ckpt_dir: str | None, own: dict) -> dict:
    """On a user's script: the target's next torch.save(obj, PATH) or dcp.save pauses midway and
    is killed there; what it loads after the restart is judged by lab.exercises.script.cut."""
    return cut_a_save(drill, target)
