"""How a job comes back from a lost worker: one choice (--recovery), made once, said once.

    restart    the lab's tuned restart: torchrun's agent restarts the worker group through the
               lab's rendezvous (lab.node.fast_rendezvous: agents wake on the store instead
               of torch's 1 s poll) with preloaded workers. Fixed-size jobs. About 0.7 s
               from a kill to the first step on 2 x 2 (docs/benchmarks.md).
    torchrun   torchrun's own rendezvous (c10d, or the --rdzv-backend given): what an
               elastic job, a lost node or a lost rendezvous host needs. About 3 s.
    in-process the survivors stay and a warm spare takes the lost rank's state from a peer
               (lab.inprocess): no restart, no step redone. For a script that trains in
               lab.inprocess's attempts() (the lab's trainer does), on a runtime that runs a
               keeper per node. About 0.4 s.
    auto       (the default) the fastest style the job can survive: in-process where the job
               can run it (a script that trains in lab.inprocess's attempts(), on a runtime
               with keepers; the drills that judge it, on the lab's trainer); else restart,
               unless the job is elastic, a drill needs torchrun's rendezvous, the runtime
               cannot host the lab's, or --rdzv-backend / --torch-defaults chose torchrun's
               path. A hang in-process cannot end (a rank hung in Python, still beating) falls
               back to a restart of the whole group (lab.node.inprocess.rounds, docs/recovery.md).

`choose` turns the choice into the topology's rendezvous and says why; every refusal is
one line naming what to use instead. It knows nothing of runtimes beyond what they declare
(their RDZV_BACKENDS and why they take no more).
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.errors import LabError
from lab.topology import Topology

AUTO, RESTART, TORCHRUN, IN_PROCESS = "auto", "restart", "torchrun", "in-process"
CHOICES = (AUTO, RESTART, TORCHRUN, IN_PROCESS)
LAB_RDZV = "lab"  # lab.node.fast_rendezvous.NAME (lab.node sits above this module)
DEFAULT_TORCHRUN_RDZV = "c10d"
IN_PROCESS_UNSAID = (
    "nothing said this job can recover in-process (lab run --recovery in-process SCRIPT runs a script that "
    "uses lab.inprocess)"
)
AUTO_IN_PROCESS = "the fastest this job survives: a warm spare takes the lost rank's place, the others stay"
IN_PROCESS_API = "lab.inprocess"  # what a script that opted in imports
# Backends on which auto does not pick in-process: no test here has proven it there (no GPU).
UNPROVEN_IN_PROCESS = {
    "nccl": "auto picks in-process on gloo only: no GPU run has proven it on nccl yet (scripts/gpu-check.sh "
    "runs it; --recovery in-process asks for it)"
}


@dataclass(frozen=True)
class Recovery:
    """The style a job runs and why it was chosen."""

    style: str
    why: str

    def line(self) -> str:
        return f"recovery: {self.style} ({self.why})"


@dataclass(frozen=True)
class Host:
    """What a runtime declares about rendezvous: the backends its nodes can run, and why not more."""

    runtime: str
    rdzv_backends: tuple[str, ...]
    no_lab_rdzv: str = ""  # why the lab's rendezvous does not run there ("" where it does)
    torchrun_rdzv: str = DEFAULT_TORCHRUN_RDZV  # the rendezvous `torchrun` style takes there
    no_in_process: str = "its nodes run no keeper"  # why in-process recovery does not run there ("": it does)

    def refusal(self, rdzv: str) -> str:
        """Why this runtime cannot run that rendezvous backend, in one line ("" when it can)."""
        if rdzv in self.rdzv_backends:
            return ""
        return (
            f"--rdzv-backend {rdzv}: the {self.runtime} runtime runs {' or '.join(self.rdzv_backends)}; "
            f"drop --rdzv-backend (or use --runtime local, which runs every backend)"
        )


def style_of(topology: Topology) -> str:
    """The style a topology runs (a run's state, a recorded drill)."""
    if topology.in_process:
        return IN_PROCESS
    return RESTART if topology.rdzv_backend == LAB_RDZV else TORCHRUN


def script_refuses_in_process(script: str) -> str:
    """Why a script cannot recover in-process ("" when it trains in lab.inprocess's attempts())."""
    try:
        text = open(script, encoding="utf-8", errors="replace").read()
    except OSError:
        return f"{script} cannot be read here to see whether it uses {IN_PROCESS_API}"
    if IN_PROCESS_API in text:
        return ""
    return f"{script} does not train in {IN_PROCESS_API}'s attempts() (docs/recovery.md shows how)"


# Seconds an agent gives a worker between SIGTERM and SIGKILL before a restart: torch's
# default, and the tuned restart's (lab/node/stop_grace.py says why).
TORCH_STOP_GRACE_S, RESTART_STOP_GRACE_S = 30, 5


def stop_grace_s(topology: Topology) -> int:
    """How long a topology's agents wait for a worker that ignores SIGTERM, before a restart."""
    return RESTART_STOP_GRACE_S if style_of(topology) == RESTART else TORCH_STOP_GRACE_S


def choose(
    topology: Topology,
    asked: str,
    host: Host,
    *,
    rdzv_asked: str | None = None,
    drill_needs: tuple[str, str] | None = None,
    in_process_refusal: str = IN_PROCESS_UNSAID,
    in_process_first: bool = False,
) -> tuple[Topology, Recovery]:
    """The topology with its rendezvous set for the asked style, and the style with its reason.

    rdzv_asked: --rdzv-backend as given (None: not given). drill_needs: (style, why) when a
    drill's fault needs one style. in_process_refusal: why the job's workload cannot recover
    in-process ("": it can; script_refuses_in_process). in_process_first: auto picks in-process
    where it runs (a drill whose fault it survives). A drill's needs (drill_needs) refuse
    in-process too, unless the job's workload says it recovers so (in_process_refusal ""): a drill
    that judges in-process needs the restart style it names only when it restarts. Refuses, in
    one line, what cannot run."""
    if asked not in CHOICES:
        raise LabError(f"--recovery must be one of {', '.join(CHOICES)}; got {asked!r}")
    # The backend asked for, or set by a drill's job (c10d is what a job gets when nothing is set).
    rdzv_set = rdzv_asked or (None if topology.rdzv_backend == DEFAULT_TORCHRUN_RDZV else topology.rdzv_backend)
    unproven = UNPROVEN_IN_PROCESS.get(topology.backend, "") if asked == AUTO and in_process_first else ""
    if asked == IN_PROCESS or (asked == AUTO and in_process_first and not unproven):
        needs = drill_needs if in_process_refusal else None
        why_not = _in_process_refusal(topology, host, rdzv_asked if asked == IN_PROCESS else rdzv_set, needs)
        why_not = why_not or in_process_refusal
        if not why_not:
            asked_why = "asked: the survivors stay, a warm spare takes the lost rank's state from a peer"
            return topology.replace(in_process=True), Recovery(
                IN_PROCESS, asked_why if asked == IN_PROCESS else AUTO_IN_PROCESS
            )
        if asked == IN_PROCESS:
            instead = TORCHRUN if _needs_torchrun(topology, host, rdzv_asked, drill_needs) else RESTART
            raise LabError(f"--recovery in-process: {why_not}; use --recovery {instead}")
    style, why = _pick(topology, asked, host, rdzv_set, drill_needs)
    why = unproven if unproven and style == RESTART else why
    rdzv = LAB_RDZV if style == RESTART else (rdzv_set or host.torchrun_rdzv)
    if host.refusal(rdzv):
        raise LabError(host.refusal(rdzv))
    return topology.replace(rdzv_backend=rdzv), Recovery(style, why)


def _in_process_refusal(
    topology: Topology, host: Host, rdzv_asked: str | None, drill_needs: tuple[str, str] | None
) -> str:
    """Why this job cannot recover in-process ("" when it can)."""
    if drill_needs:
        return drill_needs[1]
    if host.no_in_process:
        return f"the {host.runtime} runtime cannot run it ({host.no_in_process})"
    if topology.min_nodes:
        return "an elastic job (torchrun's --nnodes=MIN:MAX) needs torch's rendezvous; the keepers hold a fixed size"
    if topology.torch_defaults:
        return "--torch-defaults runs torch's own c10d path"
    if rdzv_asked:
        return f"--rdzv-backend {rdzv_asked}: the keepers run no rendezvous backend"
    if topology.step_watchdog_s:
        return (
            "a step watchdog (--watchdog) is torchelastic's file timer, in torchrun's agent "
            "(a keeper ends a frozen rank itself)"
        )
    return ""


def _pick(
    topology: Topology, asked: str, host: Host, rdzv_asked: str | None, drill_needs: tuple[str, str] | None
) -> tuple[str, str]:
    """(style, why), or a one-line refusal of a style the job cannot run."""
    if rdzv_asked == LAB_RDZV:  # the expert's spelling of the tuned restart
        if asked == TORCHRUN:
            raise LabError("--recovery torchrun runs torch's rendezvous, not --rdzv-backend lab: drop one of them")
        asked, flag = RESTART, "--rdzv-backend lab"
    else:
        flag = "--recovery restart"
    needs_torchrun = _needs_torchrun(topology, host, rdzv_asked, drill_needs)
    if asked == RESTART:
        if needs_torchrun:
            raise LabError(f"{flag}: {needs_torchrun}; drop it, or use --recovery torchrun")
        return RESTART, f"asked ({flag}): the lab's rendezvous"
    if asked == TORCHRUN:
        if drill_needs and drill_needs[0] == RESTART:
            raise LabError(f"--recovery torchrun: {drill_needs[1]}; drop --recovery")
        return TORCHRUN, f"asked: torch's {rdzv_asked or host.torchrun_rdzv} rendezvous"
    if needs_torchrun:
        return TORCHRUN, needs_torchrun
    return RESTART, "a fixed-size job: the lab's rendezvous restarts the group without torch's 1 s poll"


def _needs_torchrun(topology: Topology, host: Host, rdzv_asked: str | None, drill_needs: tuple[str, str] | None) -> str:
    """Why this job must take torchrun's own rendezvous ("" when the tuned restart can run)."""
    if drill_needs and drill_needs[0] == TORCHRUN:
        return drill_needs[1]
    if topology.min_nodes:
        return "an elastic job (torchrun's --nnodes=MIN:MAX) needs torch's rendezvous; the lab's has a fixed node count"
    if rdzv_asked and rdzv_asked != LAB_RDZV:
        return f"--rdzv-backend {rdzv_asked} is one of torch's rendezvous"
    if topology.torch_defaults:
        return "--torch-defaults runs torch's own c10d path"
    if LAB_RDZV not in host.rdzv_backends:
        return host.no_lab_rdzv or f"the {host.runtime} runtime does not run the lab's rendezvous"
    return ""
