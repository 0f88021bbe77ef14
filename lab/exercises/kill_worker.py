"""kill-worker: SIGKILL one worker mid-run; the group restarts and resumes from its checkpoint.

Hypothesis: with `--max-restarts` above 0, torchrun's agent sees the dead worker, stops
the others, runs a new rendezvous round and starts a fresh worker group (by default through
the lab's rendezvous, the tuned restart: lab/recovery.py). The trainer
resumes from its newest checkpoint, so at most one checkpoint interval of steps is
redone, and the job ends with weights bit-identical to an uninterrupted run.

    lab exercise run kill-worker [--target-rank 1] [--at-step 25]
    lab exercise run kill-worker --torch-defaults    # the upstream restart failure
    lab exercise run kill-worker --recovery torchrun  # torch's c10d rendezvous instead of the lab's
    lab exercise run kill-worker --recovery in-process  # no restart: a warm spare takes the rank's place
    lab exercise run kill-worker --parallel fsdp2 --save async  # killed while a DCP step is in flight

Look for: in the node logs, "failed (exitcode: -9)" and "will restart worker group";
in the events, restart 1's checkpoint_loaded; in Prometheus, `lab_agent_restarts_used`
becoming 1, `lab_worker_group_restarts` 1 on every rank, a gap in `lab_steps_total`.

With --torch-defaults (no TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1) the restarted workers
share the agent's store with the previous round, whose gloo addresses are still in it
(pytorch/pytorch#135712). A worker that looks a peer up before that peer has written its
new address connects to a dead port and fails in connectFullMesh. Which rounds lose this
race depends on start-up order: left alone, about one round in ten wins it (7 unattended
runs here: 2 recovered at the second restart; 1 was still failing rounds, each waiting
out the 60 s process-group timeout, when the drill gave up at 240 s). So the drill makes the order
certain, as a loaded machine would: node0's restarted workers start 4 s late. The same
delay is harmless with the lab's fresh store per round, where a late peer is waited for.

With `--parallel fsdp2 --save async` the trainer writes each DCP step from a thread and commits it
at the next save: whenever the kill lands past the first save, one step's files are in flight or
written but not committed. A careful resume loads the newest committed step, never the one in
flight (its folder is still `.tmp`), and loses at most two intervals: the verdict names both steps.
"""

from __future__ import annotations

import signal

from lab.exercises import drill_job, inprocess_verdict, observe
from lab.exercises.drill import aimed, paced_trainer
from lab.exercises.seen import Seen
from lab.health.events import Event
from lab.options import Option
from lab.report import Report
from lab.topology import SAVES, Topology

NAME = "kill-worker"
SUMMARY = "SIGKILL one worker; the group restarts and resumes bit-identical"
IN_PROCESS_JUDGED = True  # --recovery in-process: judged by lab.exercises.inprocess_verdict
INJECTS = ("kill_worker",)  # Node faults it uses (lab.exercises.grid); --torch-defaults adds one
DEFAULT_TARGET_RANK, DEFAULT_AT_STEP = 1, 25
STEPS, CKPT_EVERY = 60, 10
LATE_START_S = 4.0
OPTIONS = (
    Option(
        "--save",
        "how the trainer saves its DCP steps (with --parallel fsdp2): sync (default), or async, so that the "
        "kill lands while a step is written from a thread and not yet committed",
        "sync",
        choices=SAVES,
    ),
)


def in_flight(options) -> bool:
    """The trainer saves asynchronously: a step is in flight whenever the kill lands past the first save."""
    return options.own.get("save") == "async"


def trainer_refusal(options) -> str:
    if in_flight(options) and options.parallel != "fsdp2":
        return "--save async is how DCP saves: add --parallel fsdp2 (the DDP trainer saves one file, in the step)"
    if in_flight(options) and options.at_step <= CKPT_EVERY:
        return f"--save async: the first save begins at step {CKPT_EVERY}; choose --at-step {CKPT_EVERY + 1} or later"
    return ""


def topology(options) -> Topology:
    # --torch-defaults: a failing round waits the process-group timeout in gloo's connect retry;
    # one restart shows the failure (the late start makes it certain), a second only repeats it.
    return drill_job(
        options,
        max_restarts=1 if options.torch_defaults else 2,
        pg_timeout_s=10 if options.torch_defaults else Topology.pg_timeout_s,
    )


def injects(options) -> tuple[str, ...]:
    return (*INJECTS, "delay_restarted_workers") if options.torch_defaults else INJECTS


def trainer_args(options) -> list[str]:
    return paced_trainer(STEPS, CKPT_EVERY) + (["--save", "async"] if in_flight(options) else [])


def run(drill, options) -> Report:
    target = options.target_rank
    node, local_rank = drill.reach(target, options.at_step)
    if options.torch_defaults:
        drill.inject(drill.store_host, "delay_restarted_workers", seconds=LATE_START_S)
    aimed(drill.inject(node, "kill_worker", local_rank=local_rank, sig=int(signal.SIGKILL)), target)
    if options.torch_defaults:  # node0's late workers wait out gloo's connect after node1 gave up
        drill.wait_failed(240)
        return judge(drill.gather(NAME, None, logs=True), options)
    return judge(drill.gather(NAME, 240, reference=trainer_args(options)), options)


def judge(seen: Seen, options) -> Report:
    report = seen.new_report()
    if options.torch_defaults:
        return judge_torch_defaults(seen, report)
    if seen.topology.in_process:
        inprocess_verdict.judge(report, seen, seen.injected("kill_worker")["time"], options.target_rank)
        return report
    observe.judge_restart_resume(report, seen, seen.injected("kill_worker")["time"], CKPT_EVERY, in_flight(options))
    return report


def judge_torch_defaults(seen: Seen, report: Report) -> Report:
    report.facts["restarts"] = observe.restarts(seen.events)
    report.facts["lost_steps"] = None
    report.facts["final_weights_match_reference"] = False
    codes = {node: "running" if code is None else code for node, code in seen.codes.items()}
    failed = any(code not in (0, "running") for code in codes.values())
    report.check("with torch's defaults the job fails", failed, f"exit codes {codes}")
    report.check("the restarted workers failed in connectFullMesh", "connectFullMesh" in "".join(seen.logs.values()))
    report.check(
        "no restarted group ever completed a step",
        not any(e["event"] == Event.STEP and e["restart"] > 0 for e in seen.events),
    )
    report.explanation = (
        "torchrun shares its rendezvous TCPStore with the workers; the restarted group reads the previous "
        f"round's gloo addresses from it and cannot connect (pytorch/pytorch#135712); node0's restarted "
        f"workers started {LATE_START_S:.0f} s late, so their peers always read a stale address. lab.node.launch sets "
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 to give every round a fresh store."
    )
    return report


SCRIPT_RECOVERY = "restart"


def break_script(drill, target: int, ckpt_dir: str | None, own: dict) -> dict:
    """On a user's script (lab.exercises.script): SIGKILL the target rank's worker."""
    node, local_rank = drill.locate(target)
    return aimed(drill.inject(node, "kill_worker", local_rank=local_rank, sig=int(signal.SIGKILL)), target)
