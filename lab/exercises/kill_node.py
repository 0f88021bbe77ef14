"""kill-node: a whole node dies at once (agent and workers), as a machine losing power.

Hypothesis, fixed-size job (`--nnodes=2`): the surviving agent sees its workers fail
(their peers are gone), restarts its group and waits in a new rendezvous round;
when the runtime brings the node back, the round completes and training resumes
from the newest checkpoint, ending bit-identical to an uninterrupted run.

Hypothesis, elastic job (`--elastic`, `--nnodes=1:2`): nobody brings the node back;
after the rendezvous' last call the survivors carry on with fewer ranks (4 -> 2),
resume from the checkpoint and finish. Their weights differ from a 4-rank run's, as
they must: the same steps now average two ranks' gradients, not four. With `--rejoin`
the node comes back once the survivors train without it: its agent asks to join, the
survivors' agent restarts its group at its next look, and the job grows back (4 -> 2 -> 4;
`--nodes 4 --nproc-per-node 1`: 4 -> 3 -> 4), each time from the newest checkpoint, every
sample of the epoch still trained once (the trainer's sample ledger).

Under `--recovery in-process` (a fixed-size job; asked for, not the default) each node runs a
keeper, not torchrun's agent: no spare can take a whole node's ranks. The surviving keeper
hears the lost keeper's silence (5 s), stops its ranks and waits; when the node comes back its
keeper asks for a round, and every rank restarts from the checkpoint (lab.node.inprocess.fallback).

    lab exercise run kill-node [--target-rank 3] [--at-step 25] [--elastic [--rejoin] | --recovery in-process]

On your own script (`--script PATH`) --elastic and --rejoin do the same: the script starts again
at the new WORLD_SIZE from its own checkpoint (lab.exercises.script.resize adds the checks).

The target rank's node must not be node0, which hosts the c10d rendezvous store:
that is `kill-rendezvous-host`. Look for: "failed (exitcode" on the survivor, a new
rendezvous round in its log, and in the events the next round's world size.
"""

from __future__ import annotations

import time

from lab.errors import LabError
from lab.exercises import drill_job, inprocess_verdict, observe, samples
from lab.exercises.drill import aimed, paced_trainer
from lab.exercises.seen import Seen
from lab.health.events import AgentEvent, Event
from lab.options import Option
from lab.report import Report
from lab.topology import Topology

NAME = "kill-node"
SUMMARY = "SIGKILL a whole node; a fixed job recovers when it returns, an elastic one shrinks"
INJECTS = ("kill_node", "restart")  # Node faults it uses (lab.exercises.grid)
MIN_NODES = 2  # a node to lose and one to survive it
DEFAULT_TARGET_RANK, DEFAULT_AT_STEP = 3, 25
STEPS, CKPT_EVERY = 60, 10
STEPS_REJOIN = 240  # room for the shrink, the survivors' steps without the node, and the growth back
OPTIONS = (
    Option("--elastic", "an elastic job (--nnodes=1:N): the survivors carry on without the node", switch=True),
    Option(
        "--rejoin",
        "with --elastic: the node comes back once the survivors train without it, and the job grows back",
        switch=True,
    ),
)
SCRIPT_OPTIONS = ("elastic", "rejoin")  # your script on an elastic job: lab.exercises.script.resize judges it


# A node's loss changes the rendezvous' membership, which torch's c10d rendezvous is built for
# (and an elastic job needs); the lab's tuned restart assumes every node comes back as it was.
RECOVERY_NEEDS = ("torchrun", "kill-node drills a node's loss through torch's c10d rendezvous")
# --recovery in-process (a fixed job): the survivors' keepers stop their ranks and wait for the
# node's keeper to come back, then every rank restarts from the checkpoint (lab.node.inprocess.fallback).
# Only when asked: the keepers hear the loss after 5 s of silence, c10d's agent at once.
IN_PROCESS_JUDGED, IN_PROCESS_FIRST = True, False


def topology(options) -> Topology:
    elastic = options.own.get("elastic", False)
    if options.own.get("rejoin") and not elastic:  # on the trainer and on a script alike
        raise LabError("--rejoin is an elastic job's: add --elastic (a fixed-size job always gets its node back)")
    return drill_job(options, max_restarts=2, min_nodes=1 if elastic else None, last_call_timeout_s=5)


def injects(options) -> tuple[str, ...]:
    shrinks_for_good = options.own.get("elastic") and not options.own.get("rejoin")
    return ("kill_node",) if shrinks_for_good else INJECTS  # nobody brings that node back


def trainer_args(options) -> list[str]:
    return paced_trainer(STEPS_REJOIN if options.own.get("rejoin") else STEPS, CKPT_EVERY)


def run(drill, options) -> Report:
    drill.reach(options.target_rank, options.at_step)
    target, node = off_the_store_host(drill, options.target_rank, options.target_rank_chosen)
    fault = aimed(drill.inject(node, "kill_node"), target)
    elastic = drill.topology.min_nodes is not None
    if not elastic:
        bring_back(drill, node, fault)
    elif options.own.get("rejoin"):
        rejoin_once_shrunk(drill, node, fault)
    return judge(
        drill.gather(NAME, 240, reference=None if elastic else trainer_args(options), survivor=drill.store_host),
        options,
    )


def judge(seen: Seen, options) -> Report:
    if seen.topology.in_process:
        return judge_in_process(seen)
    report = seen.new_report()
    events, codes, fault = seen.events, seen.codes, seen.injected("kill_node")
    after = [e for e in events if e["time"] > fault["time"]]
    worlds = sorted({e["world_size"] for e in after if e["event"] == Event.RENDEZVOUS_DONE})
    saved, reached, loaded = observe.checkpoint_progress(events, fault["time"])
    report.facts["restarts"] = observe.restarts(events)
    report.facts["lost_steps"] = reached - loaded[0] if loaded else None
    report.facts["world_size_after"] = worlds
    report.facts["recovery"] = observe.recovery_breakdown(events, seen.agents, fault["time"])
    report.check(
        "resumed from the newest checkpoint",
        bool(loaded) and bool(saved) and loaded[0] == max(saved),
        f"newest before the kill {max(saved, default=None)}, loaded {loaded[:1]}",
    )
    shape = seen.topology
    if shape.min_nodes is not None and options.own.get("rejoin"):
        judge_rejoin(report, seen, after)
    elif shape.min_nodes is not None:
        fewer = shape.world_size - shape.nproc_per_node
        survivor = seen.extra["survivor"]
        report.check("the survivor finished the job", codes.get(survivor) == 0, f"exit codes {codes}")
        observe.check_resized(report, shape, after, rejoined=False)
        samples.check(report, events)  # the rest of the epoch dealt to fewer ranks: none skipped, none twice
        report.explanation = (
            f"an elastic job (--nnodes={shape.min_nodes}:{shape.nodes}) closes its next rendezvous round after the "
            f"last call with the nodes it has; the survivors resume from the checkpoint with world size {fewer}"
        )
    else:
        report.check(
            "the job succeeded once the node was back", all(c == 0 for c in codes.values()), f"exit codes {codes}"
        )
        report.check(
            f"the restarted group had all {shape.world_size} ranks again",
            worlds == [shape.world_size],
            f"world size after: {worlds}",
        )
        observe.judge_reference(report, seen)
    return report


def judge_rejoin(report: Report, seen: Seen, after: list[dict]) -> None:
    """--elastic --rejoin: fewer ranks, then all of them again once the node was back; both nodes
    finished, and every sample of the epoch was trained once through both changes."""
    shape, codes = seen.topology, seen.codes
    fewer = shape.world_size - shape.nproc_per_node
    report.check("the job ended well on every node", all(c == 0 for c in codes.values()), f"exit codes {codes}")
    observe.check_resized(report, shape, after, rejoined=True)
    samples.check(report, seen.events)  # the epoch dealt to fewer ranks, then to all again
    report.explanation = (
        f"an elastic job (--nnodes={shape.min_nodes}:{shape.nodes}) went on with the {fewer} ranks it had after "
        f"the last call; the node's agent, started again, asked to join, and the survivors' agent restarted its "
        f"group at its next look: {shape.world_size} ranks again, from the newest checkpoint each time"
    )


def judge_in_process(seen: Seen) -> Report:
    """--recovery in-process: the survivors' keepers heard the node's keeper fall silent, and
    once it was back every rank restarted from the checkpoint (inprocess_verdict.judge_fallback)."""
    report, fault = seen.new_report(), seen.injected("kill_node")
    lost = int(fault["node"].removeprefix("node"))
    heard = [
        a
        for a in seen.agents
        if a["name"] == AgentEvent.KEEPER_LOST and a["time"] > fault["time"] and a["event"]["metadata"]["node"] == lost
    ]
    after = heard[0]["time"] - fault["time"] if heard else None
    report.check(
        f"the other keepers heard {fault['node']}'s keeper fall silent and stopped their ranks to wait for it",
        bool(heard)
        and {a["node"] for a in heard} == {f"node{n}" for n in range(seen.topology.nodes)} - {fault["node"]},
        f"heard by {sorted(a['node'] for a in heard)}, {after:.1f} s after the kill" if heard else "no keeper heard it",
    )
    fell = inprocess_verdict.judge_fallback(report, seen, fault["time"])
    report.explanation = (
        f"{fault['node']} was lost whole, its keeper with its ranks: no spare was left to take their places. The "
        f"other keepers heard its silence after {after or 0:.1f} s and stopped their ranks, whose group cannot re-form "
        f"without the lost ones; once the lab started {fault['node']} again, its keeper asked for a round and every "
        f"rank restarted from the checkpoint at step {inprocess_verdict.steps_text(fell)}, redoing "
        f"{fell['lost_steps']} steps, {inprocess_verdict.cost_text(fell)} from the kill to the first step"
    )
    return report


def off_the_store_host(drill, target: int, chosen: bool) -> tuple[int, str]:
    """(rank, its node): the target, moved off node0 unless the user chose it."""
    node, _ = drill.locate(target)
    if node == drill.store_host and not chosen:
        # Which node's agent gets which ranks is the c10d rendezvous' choice (the order agents
        # join in, which a Ray cluster does not fix): by default, hit the last rank off node0.
        target = max(r for r in range(drill.topology.world_size) if drill.locate(r)[0] != drill.store_host)
        node, _ = drill.locate(target)
    if node == drill.store_host:
        raise LabError(f"rank {target} runs on {node}, which hosts the rendezvous: that drill is kill-rendezvous-host")
    return target, node


def rejoin_once_shrunk(drill, node: str, fault: dict) -> None:
    """Start the lost node again once the survivors have trained a step without it: it comes back
    to a job that has shrunk, and must make it grow (a node back sooner joins the shrinking round)."""
    full = drill.topology.world_size

    def trained_without_it() -> bool:
        everything = drill.events()
        events = [e for e in everything if e["time"] > fault["time"]]
        shrunk = observe.first_time(
            events, fault["time"], lambda e: e["event"] == Event.RENDEZVOUS_DONE and e["world_size"] < full
        )
        if shrunk is None:
            return False
        if any(e["event"] == Event.STEP for e in everything):
            return any(e["event"] == Event.STEP and e["time"] > shrunk for e in events)
        return time.time() - shrunk > UNSEEN_TRAINING_S  # a script that prints no step: its group up a while

    drill.wait_for(trained_without_it, 120, "the survivors to train without the node")
    drill.inject(node, "restart")


def bring_back(drill, node: str, fault: dict) -> None:
    """Once the surviving agent (or keeper) has noticed, start the dead node again (a replaced machine)."""
    noticed = AgentEvent.KEEPER_LOST if drill.topology.in_process else AgentEvent.FAILURE_DETECTED
    drill.wait_for(
        lambda: observe.first_time(
            observe.agent_events(drill.events_dir), fault["time"], lambda r: r["name"] == noticed
        ),
        60,
        "the surviving agent to notice",
    )
    drill.inject(node, "restart")


SCRIPT_RECOVERY = "restart"
UNSEEN_TRAINING_S = 3.0  # --rejoin on a script that prints no step: how long the shrunk group runs first


def break_script(drill, target: int, ckpt_dir: str | None, own: dict) -> dict:
    """On a user's script: SIGKILL a whole node (not node0's rendezvous), and bring it back; on an
    elastic job (--elastic) leave it dead, or (--rejoin) start it once the survivors train without it.
    The record says whether the node is gone for good (lab.exercises.script.resize judges that)."""
    target, node = off_the_store_host(drill, target, chosen=False)
    fault = drill.inject(node, "kill_node")
    if not own.get("elastic"):
        bring_back(drill, node, fault)
    elif own.get("rejoin"):
        rejoin_once_shrunk(drill, node, fault)
    fault["lost_for_good"] = bool(own.get("elastic")) and not own.get("rejoin")
    return aimed(fault, target)
