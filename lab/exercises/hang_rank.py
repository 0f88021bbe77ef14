"""hang-rank: freeze one rank (SIGSTOP); its peers block in the all-reduce, and something must end it.

Hypothesis: a hung rank fails nobody by itself: its peers wait inside the gradient
all-reduce. gloo's default timeout would make them wait 30 minutes. By default (in-process
recovery, lab.inprocess) the frozen rank's keeper hears no heartbeat from it for a third of
the process-group timeout (3.3 s of this drill's 10 s) and SIGKILLs it: its death closes its
connections, the others leave their all-reduce, and a warm spare takes its place with its
state from a peer. With `--recovery restart` the lab's process-group timeout (10 s,
`--pg-timeout`) turns the hang into an error, the agent restarts the group (after a
SIGTERM-to-SIGKILL wait for the frozen process: 5 s under the lab's tuned restart, torchrun's
30 s under `--recovery torchrun`), and the job resumes from its checkpoint. Before any of
that, Prometheus already shows the frozen rank: its exporter stops answering.

    lab exercise run hang-rank [--target-rank 1] [--at-step 25] [--recovery restart [--watchdog 3]]

While it hangs, the drill asks every rank for its Flight Recorder entries and stacks
(lab.exercises.forensics): the frozen rank does not answer, the others name the
collective they wait in and the line. With `--watchdog SECONDS` (a restart: the timer lives
in torchrun's agent) each trainer step registers a deadline with torchelastic's file-timer
server in its agent (TORCHELASTIC_ENABLE_FILE_TIMER=1), which SIGKILLs the frozen rank once
the deadline passes: no timeout, no SIGTERM-to-SIGKILL wait.

With `--in-python` the rank hangs in Python instead (SIGRTMIN+7: it waits for ever, as on a
data loader that never answers), its threads still running: it still beats and its exporter
still answers. No keeper can tell it from a slow rank, so its peers' collectives time out after
the 10 s, and in-process recovery falls back to a restart of the whole group from the
checkpoint (lab.node.inprocess.rounds); the verdict says it fell back, why, and what it cost.

Look for: the frozen rank's target going down in Prometheus (`up{rank="1"} == 0`); in-process,
the keeper's "sent no heartbeat" line and the spare's start; under a restart, the peers'
"Timed out" / gloo errors in the node logs, "will restart worker group", and restart 1's
`checkpoint_loaded`.
"""

from __future__ import annotations

import time

from lab import recovery
from lab.exercises import drill_job, forensics, inprocess_verdict, observe
from lab.exercises.drill import aimed, paced_trainer
from lab.exercises.seen import Seen
from lab.health.events import AgentEvent, Event
from lab.health.injected_error import WAIT_SIGNAL
from lab.inprocess import heartbeat
from lab.options import Option
from lab.report import Report
from lab.topology import Topology

NAME = "hang-rank"
SUMMARY = "SIGSTOP one rank; its keeper ends it (no heartbeat) and a spare takes over, or a timeout restarts"
INJECTS = ("pause_worker",)  # Node faults it uses (lab.exercises.grid)
DEFAULT_TARGET_RANK, DEFAULT_AT_STEP = 1, 25
STEPS, CKPT_EVERY, PG_TIMEOUT_S = 60, 10, 10
FORENSICS_AFTER_S = 1.0
NEEDS_PROMETHEUS = True
IN_PROCESS_JUDGED = True  # its keeper ends the frozen rank (no heartbeat): then judged as a death


OPTIONS = (
    Option(
        "--in-python",
        "the rank hangs in Python (its threads still run and beat) instead of SIGSTOP: in-process "
        "recovery falls back to a restart of the whole group after the process-group timeout",
        switch=True,
    ),
    Option(
        "--watchdog",
        "torchelastic's file-timer watchdog: the agent SIGKILLs a rank whose step takes longer than "
        "SECONDS, before the process-group timeout (default: off)",
        0,
        int,
        metavar="SECONDS",
    ),
)


SCRIPT_OPTIONS = ("in_python",)  # --in-python: the lab's watch of a script answers the signal
SCRIPT_REFUSES = {"watchdog": "the trainer's steps register the watchdog's deadlines; a script registers none"}


def topology(options) -> Topology:
    watchdog = options.own.get("watchdog") or 0
    return drill_job(options, max_restarts=1, pg_timeout_s=PG_TIMEOUT_S, step_watchdog_s=watchdog)


def injects(options) -> tuple[str, ...]:
    return ("kill_worker",) if options.own.get("in_python") else INJECTS  # a signal the rank answers


def trainer_args(options) -> list[str]:
    return paced_trainer(STEPS, CKPT_EVERY)


def hang(drill, target: int, in_python: bool) -> dict:
    """SIGSTOP the target rank's worker, or (in_python) make it wait for ever in Python."""
    node, local_rank = drill.locate(target)
    if in_python:
        return aimed(drill.inject(node, "kill_worker", local_rank=local_rank, sig=int(WAIT_SIGNAL)), target)
    return aimed(drill.inject(node, "pause_worker", local_rank=local_rank), target)


def hung(seen: Seen) -> dict:
    """The fault that hung the rank, as injected."""
    return next(f for f in seen.faults if f["fault"] in ("pause_worker", "kill_worker"))


def run(drill, options) -> Report:
    target, in_python = options.target_rank, bool(options.own.get("in_python"))
    drill.reach(target, options.at_step)
    fault = hang(drill, target, in_python)
    time.sleep(FORENSICS_AFTER_S)  # the others are in the next collective by then
    # before anything tears it down
    found = forensics.collect(drill.events_dir, drill.topology.world_size, relay=drill.runtime.gather)
    drill.progress(f"forensics: {found['finding']}")
    prom = drill.runtime.prometheus
    seen_down = None  # a rank hung in Python still answers Prometheus: its exporter's thread runs
    if not in_python:
        seen_down = drill.wait_for(
            lambda: any(s["value"] == 0 for s in prom.query(f'up{{job="lab-ranks", rank="{target}"}}')) and time.time(),
            30,
            f"Prometheus to see rank {target} down",
        )
    measured = {"forensics": found, "prometheus_saw_it_at": seen_down}
    if not drill.topology.step_watchdog_s:
        return judge(drill.gather(NAME, 240, reference=trainer_args(options), **measured), options)
    codes = drill.wait_job(60)  # the watchdog ends the job; a scheduler starts it again
    ended = time.time() - fault["time"]
    drill.progress("starting the job again")
    restarted_at = time.time()
    drill.rerun(trainer_args(options))
    seen = drill.gather(
        NAME,
        240,
        reference=trainer_args(options),
        watchdog_codes=codes,
        ended_after_s=ended,
        restarted_at=restarted_at,
        **measured,
    )
    return judge(seen, options)


def judge(seen: Seen, options) -> Report:
    report = seen.new_report()
    fault, found = hung(seen), seen.extra["forensics"]
    target, seen_down = fault["rank"], seen.extra["prometheus_saw_it_at"]
    report.facts["forensics"] = found
    report.facts["seconds_until_prometheus_saw_it"] = seen_down - fault["time"] if seen_down else None
    report.check(
        "forensics named the frozen rank, and the collective the others wait in",
        found["suspects"] == [target] and bool(found["collective"]),
        found["finding"],
    )
    if seen.topology.step_watchdog_s:
        return judge_watchdog(seen, report)
    if seen.topology.in_process and seen_down is None:  # in Python: it beats, and no keeper ends it
        return judge_python_hang(seen, report)
    if seen.topology.in_process:
        return judge_in_process(seen, report)
    events, codes = seen.events, seen.codes
    detected = observe.first_time(seen.agents, fault["time"], lambda r: r["name"] == AgentEvent.FAILURE_DETECTED)
    first_step = min((e["time"] for e in events if e["event"] == Event.STEP and e["restart"] == 1), default=None)
    report.facts["restarts"] = observe.restarts(events)
    report.facts["recovery"] = observe.recovery_breakdown(events, seen.agents, fault["time"])
    report.facts["seconds_until_the_timeout_fired"] = detected - fault["time"] if detected else None
    if seen_down is not None:
        report.check(
            "Prometheus saw the frozen rank down before the group restarted",
            first_step is None or seen_down < first_step,
            f"{seen_down - fault['time']:.1f} s after the freeze",
        )
    waited = report.facts["seconds_until_the_timeout_fired"]
    report.check(
        f"the {PG_TIMEOUT_S} s process-group timeout, not gloo's 30 minutes, ended the wait",
        waited is not None and waited < PG_TIMEOUT_S + 15,
        f"failure detected after {waited or 0:.1f} s",
    )
    loaded = [
        e["step"] for e in events if e["event"] == Event.CHECKPOINT_LOADED and e["restart"] == 1 and e["rank"] == 0
    ]
    report.check(
        "the group restarted and resumed from a checkpoint",
        report.facts["restarts"] == 1 and bool(loaded),
        f"restarts {report.facts['restarts']}, loaded {loaded[:1]}",
    )
    report.check("the job succeeded", all(c == 0 for c in codes.values()), f"exit codes {codes}")
    observe.judge_reference(report, seen)
    grace = recovery.stop_grace_s(seen.topology)
    waits = "torchrun waits" if grace == recovery.TORCH_STOP_GRACE_S else "the lab's tuned restart waits"
    report.explanation = (
        f"the peers' all-reduce timed out after the {PG_TIMEOUT_S} s process-group timeout; the hung "
        f"worker does not end on SIGTERM, so its agent waits {grace} s before SIGKILL ({waits} that long), and the "
        "other agents wait that long in the next rendezvous round (--watchdog SECONDS ends it sooner)"
    )
    return report


def judge_watchdog(seen: Seen, report: Report) -> Report:
    """--watchdog: every rank's step deadline passes (the frozen one's, and its peers' waiting in
    the collective); each agent's FileTimerServer SIGKILLs them, and then, in torch 2.13, its own
    agent (file_based_local_timer.py: "Terminating the server process ... because of expired
    timers"). The job ends within seconds; the lab starts it again, as a scheduler would."""
    watchdog, fault = seen.topology.step_watchdog_s, hung(seen)
    ended, first_codes = seen.extra["ended_after_s"], seen.extra["watchdog_codes"]
    report.facts.update(watchdog_s=watchdog, seconds_until_the_agents_ended=round(ended, 2))
    report.check(
        f"the {watchdog} s step watchdog ended the hang before the {PG_TIMEOUT_S} s timeout",
        ended < PG_TIMEOUT_S and all(c == 128 + 9 for c in first_codes.values()),
        f"every agent SIGKILLed by its own timer server {ended:.1f} s after the freeze: exit codes {first_codes}",
    )
    events = [e for e in seen.events if e["time"] >= seen.extra["restarted_at"]]
    loaded = [e["step"] for e in events if e["event"] == Event.CHECKPOINT_LOADED and e["rank"] == 0]
    first_step = min((e["time"] for e in events if e["event"] == Event.STEP), default=None)
    report.facts["restarts"] = 0
    report.facts["recovery"] = {"total": first_step - fault["time"] if first_step else None}
    report.check("the rerun resumed from a checkpoint", bool(loaded), f"loaded {loaded[:1]}")
    report.check("the job succeeded", all(c == 0 for c in seen.codes.values()), f"exit codes {seen.codes}")
    observe.judge_reference(report, seen)
    report.explanation = (
        f"every rank's {watchdog} s step deadline passed: the agents' file-timer servers SIGKILLed the ranks and "
        "then themselves (torch 2.13 ends the agent too), so the hang became a job failure within seconds, "
        "without the process-group timeout or torchrun's 30 s wait; the job then needs a restart from outside"
    )
    return report


def judge_in_process(seen: Seen, report: Report) -> Report:
    """--recovery in-process: the frozen rank's keeper hears no heartbeat (lab.inprocess.heartbeat)
    and SIGKILLs it; from there it is a death, survived like kill-worker's."""
    fault = hung(seen)
    target, limit = fault["rank"], heartbeat.frozen_after(PG_TIMEOUT_S)
    ended = [a for a in seen.agents if a["name"] == AgentEvent.RANK_FROZEN and a["time"] > fault["time"]]
    ended_rank = ended[0]["event"].get("metadata", {}).get("rank") if ended else None
    after = ended[0]["time"] - fault["time"] if ended else None
    report.facts["seconds_until_the_keeper_ended_it"] = after
    report.check(
        f"its keeper heard no heartbeat for {limit:.1f} s and SIGKILLed the frozen rank, before its peers' "
        f"{PG_TIMEOUT_S} s timeout",
        ended_rank == target and after is not None and after < PG_TIMEOUT_S,
        f"rank {ended_rank} ended {after:.1f} s after the freeze" if after is not None else "no rank was ended",
    )
    inprocess_verdict.judge(report, seen, fault["time"], target)
    report.explanation = (
        f"a frozen rank keeps its connections open, so its peers would wait out the {PG_TIMEOUT_S} s process-group "
        f"timeout; its heartbeat thread stopped with it, and after {limit:.1f} s of silence its keeper SIGKILLed it. "
        "Its death closed its connections: the survivors left their all-reduce, a warm spare took its place and its "
        "state from a peer"
    )
    return report


def judge_python_hang(seen: Seen, report: Report) -> Report:
    """--in-python under --recovery in-process: it still beats, so no keeper ends it and no spare
    can take its place; its peers' collectives time out, and the keepers fall back to a restart."""
    fault = hung(seen)
    fell = inprocess_verdict.fallback_facts(seen, fault["time"])
    detect, target = fell["seconds"]["detect"], fault["rank"]
    frozen = [a for a in seen.agents if a["name"] == AgentEvent.RANK_FROZEN and a["time"] > fault["time"]]
    report.check(
        f"no keeper took rank {target} for frozen (it still beat); its peers' collectives timed out at the "
        f"{PG_TIMEOUT_S} s process-group timeout",
        not frozen and detect is not None and PG_TIMEOUT_S * 0.9 <= detect < PG_TIMEOUT_S + 15,
        f"the restart was asked {detect:.1f} s after the hang" if detect is not None else "no restart was asked",
    )
    inprocess_verdict.judge_fallback(report, seen, fault["time"])
    report.explanation = (
        f"rank {target} hung in Python with its threads running, so it kept beating and no keeper could tell it "
        f"from a slow rank. Its peers' collectives timed out after {PG_TIMEOUT_S} s and each left (status 76); a "
        "spare cannot take a living rank's place, so in-process recovery fell back to a restart: every node's keeper "
        f"stopped its ranks, the hung one with them, and started them afresh from the checkpoint at step "
        f"{inprocess_verdict.steps_text(fell)}, redoing {fell['lost_steps']} steps. It cost "
        f"{inprocess_verdict.cost_text(fell)} from the hang to the first step, most of it the process-group timeout"
    )
    return report


SCRIPT_RECOVERY = "restart"
SCRIPT_FORENSICS = True  # the runner asks every rank where it stands while it hangs
SCRIPT_HANGS_FOR_GOOD = True  # the target is never let go: only a process-group timeout ends it


def break_script(drill, target: int, ckpt_dir: str | None, own: dict) -> dict:
    """On a user's script: SIGSTOP the target rank's worker (or hang it in Python: the lab's
    watch answers the signal, lab.node.user_script); only the script's own process-group
    timeout turns the hang into a restart."""
    return hang(drill, target, bool(own.get("in_python")))
