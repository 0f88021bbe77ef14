"""The contract every runtime keeps: a `Runtime` brings nodes up and down, a `Node` is one host.

CLI verbs, the exercise engine, lessons and benchmarks talk only to these two classes;
none of them asks which runtime it holds. A runtime is one module of lab/runtimes/ (or
one named in $LAB_RUNTIMES) with a `Runtime` subclass that sets `name`: the registry in
lab.runtimes finds it, `--runtime` offers it and its `OPTIONS` become flags of every verb
that starts a job. docs/architecture.md has the recipe.
"""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from lab import recovery
from lab.errors import LabError
from lab.nodeenv import NodeEnv
from lab.options import Option
from lab.rundir import RunDir
from lab.runtimes import state as runstate
from lab.runtimes.faults import Faults, FaultUnsupported
from lab.runtimes.plan import LaunchPlan
from lab.topology import Topology
from lab.workloads import checkpoint_files  # no torch: a drill damages files while it holds a worker stopped

Log = Callable[[str], None]
WORKERS_FILE = "workers.json"  # in the node's directory; lab.node.launch writes it (LAB_WORKERS_FILE)


# The node image: taken by the runtimes whose nodes run one (docker: a container; k8s: a pod).
IMAGE = Option(
    "--image",
    "the node image: docker's default $LAB_IMAGE or torchrun-lab:cpu; k8s's the overlay's, and with it "
    "your script's absolute path in that image",
)


class Node(ABC, Faults):
    name: str  # e.g. node0: the node's hostname where the runtime can give it one
    index: int  # the node's index in the topology (node 0 hosts the rendezvous)
    address: str  # where the other nodes (and Prometheus) reach it
    dir: Path  # its directory in the run directory: its log, and what it tells the controller

    @property
    def pid(self) -> int | None:
        """The node's first process as this machine sees it (None when it has none here)."""
        return None

    @abstractmethod
    def start(self, argv: list[str]) -> None:
        """Run argv (a Topology.launch_argv) as this node's agent."""

    @abstractmethod
    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the agent (torchrun stops its workers), SIGKILL what outlives grace_s."""

    @abstractmethod
    def exit_code(self) -> int | None:
        """None while the agent runs; its exit status after (128+N if killed by signal N)."""

    @property
    def log_path(self) -> Path:
        """The agent's and its workers' combined output."""
        return self.dir / "node.log"

    def record(self) -> dict[str, Any]:
        """What the run's state keeps of this node (lab.runtimes.state): enough to attach to it."""
        return {"name": self.name, "index": self.index, "address": self.address}


class NodeFiles:
    """What a node whose directory this machine can read (local, docker and a Ray machine's own
    node) keeps there: its log, its exit status, its workers' pids; and its checkpoints."""

    dir: Path

    @property
    def exit_file(self) -> Path:
        """The agent's exit status, written by the nodeproc shim."""
        return self.dir / "exit"

    @property
    def workers_file(self) -> Path:
        """{local_rank: pid} of the agent's workers (lab.node.worker_record)."""
        return self.dir / WORKERS_FILE

    def corrupt_checkpoint(self, directory: str, mode: str = "truncate", saved: tuple = ()) -> str:
        try:
            return str(checkpoint_files.corrupt_newest(Path(directory), mode, saved))
        except (checkpoint_files.CheckpointError, ValueError) as e:
            raise FaultUnsupported(str(e)) from None


class Runtime(ABC):
    """Where a lab's nodes run. Subclasses set `name` (which registers them), declare their flags
    in OPTIONS (constructor keywords of the same names) and implement up/attach/down."""

    name: ClassVar[str]
    OPTIONS: ClassVar[tuple[Option, ...]] = ()
    DRILLS: ClassVar[bool] = False  # the exercise engine can drive its nodes (lab exercise run --runtime)
    # lab chaos runs here: its kinds' waits and restarts are proven on this runtime's nodes.
    CHAOS: ClassVar[bool] = False
    NODES_ARE: ClassVar[str] = "nodes"  # what its nodes are, in a few words ("2 containers")
    # Its nodes' files are this machine's, at the same paths (the run dir, shared or mounted):
    # a drill reads a script's working dir, checkpoints and result file here. Not so in pods.
    HOST_FILES: ClassVar[bool] = True
    # `lab doctor` probes its nodes: proven on them (tests/test_doctor.py), its probes sharing a folder.
    DOCTOR: ClassVar[bool] = False
    # Its nodes may be other machines, which share only the run dir with this one: a folder made
    # here for a second lab (the doctor run after a failed connect) is not theirs.
    MACHINES_ELSEWHERE: ClassVar[bool] = False
    # What a drill on a user's script needs here beyond the script ("" where nothing): the grid says it.
    SCRIPT_DRILLS_NEED: ClassVar[str] = ""
    NODE: ClassVar[type[Node] | None] = None  # its Node class: which faults it can inject (Faults.refusal)
    AUTO: ClassVar[bool] = False  # what --runtime auto means
    # Its nodes run this machine's own lab and torch (not an image's or another machine's copy):
    # a job's result depends only on what this machine has (lab.exercises.reference_cache).
    HOST_CODE: ClassVar[bool] = False
    # Every node sees one checkpoints folder (node_env's ckpt_shared): what the trainer's
    # --parallel fsdp2 needs, DCP's step being one folder of every rank's shards.
    SHARED_CHECKPOINTS: ClassVar[bool] = True
    # The rendezvous backends its nodes run (--rdzv-backend, and --recovery through lab.recovery),
    # and why not the lab's own where it is missing: a runtime that takes no more refuses the rest.
    RDZV_BACKENDS: ClassVar[tuple[str, ...]] = ("c10d",)
    NO_LAB_RDZV: ClassVar[str] = ""
    # Why its nodes cannot run in-process recovery's keepers ("" where they can: lab.recovery).
    NO_IN_PROCESS: ClassVar[str] = "its nodes run torchrun's agent, not the lab's keeper"
    registered: ClassVar[dict[str, type[Runtime]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            Runtime.registered[cls.name] = cls

    def __init__(self, run_dir: RunDir, *, log: Log = print) -> None:
        self.run_dir = run_dir
        self.log = log
        self.state_dir: Path | None = None  # where a fresh rerun keeps its events and checkpoints

    @classmethod
    def from_args(cls, run_dir: RunDir, args: argparse.Namespace, log: Log = print) -> Runtime:
        """The runtime as the command line asks for it (each of OPTIONS by its name)."""
        return cls(run_dir, log=log, **{o.name: getattr(args, o.name) for o in cls.OPTIONS})

    @classmethod
    def rendezvous(cls) -> recovery.Host:
        """What lab.recovery needs to know of this runtime to choose a job's recovery style."""
        return recovery.Host(cls.name, cls.RDZV_BACKENDS, cls.NO_LAB_RDZV, no_in_process=cls.NO_IN_PROCESS)

    def job_rendezvous(self) -> recovery.Host:
        """The same, for this runtime as its options set it up (the k8s overlay decides there)."""
        return self.rendezvous()

    def check_rendezvous(self, topology: Topology) -> None:
        """Refuse a rendezvous this runtime's nodes cannot run (lab.recovery.choose refuses it in the
        user's words first; this holds for every caller of `up`)."""
        refusal = self.job_rendezvous().refusal(topology.rdzv_backend)
        if refusal:
            raise LabError(refusal)

    def check(self) -> None:
        """Fail in one line, before anything starts, when this runtime cannot run here now
        (by default there is nothing to check before `up`)."""
        return None

    def plan(self, topology: Topology, script: str, script_args: list[str]) -> LaunchPlan:
        """The nodes laid out and their commands, starting nothing (`--dry-run` prints it); or
        why this runtime cannot tell before it starts."""
        raise LabError(f"the {self.name} runtime has no dry run")

    def up(self, topology: Topology, script: str, script_args: list[str]) -> tuple[Topology, Sequence[Node]]:
        """Start one agent per node; returns the topology as it runs (its rendezvous host) and the
        nodes. The one lifecycle: the hosts up (hosts_up), then the nodes started."""
        plan = self.hosts_up(topology, script, script_args)
        self.start_nodes(plan)
        return plan.topology, plan.nodes

    def hosts_up(self, topology: Topology, script: str, script_args: list[str]) -> LaunchPlan:
        """The nodes' hosts up, nothing started on them (`lab doctor` probes them instead): prepare
        (every refusal, then the plan), record the plan once (from then on `lab down` knows what
        to remove), provision."""
        self.check_rendezvous(topology)
        plan = self.prepare(topology, script, script_args)
        runstate.save(self.run_dir, plan.state())
        self.provision(plan)
        return plan

    def prepare(self, topology: Topology, script: str, script_args: list[str]) -> LaunchPlan:
        """What can refuse, then the plan: nothing the lab would have to remove exists yet."""
        return self.plan(topology, script, script_args)

    def provision(self, plan: LaunchPlan) -> None:  # noqa: B027  # a hook: most runtimes need nothing
        """What the nodes need before they start (a network, Prometheus, a store), once recorded."""

    def start_nodes(self, plan: LaunchPlan) -> None:
        for node in plan.nodes:
            node.start(self.node_argv(plan.topology, node, plan.script, plan.script_args))

    @abstractmethod
    def attach(self) -> Sequence[Node]:
        """The nodes of the lab recorded in the run directory, from any shell."""

    @abstractmethod
    def down(self, grace_s: float = 10.0) -> list[str]:
        """Stop and remove everything this runtime made for the run directory; returns what was removed."""

    def rerun(self, topology: Topology, script: str, script_args: list[str], fresh: str | None = None) -> Path:
        """Run the job again on the same nodes once it has ended, as a job of its own (an etcd
        rendezvous outlives a job and stays closed under its id). fresh: a name, and this run
        keeps its checkpoints and events apart, under the run dir's <fresh>/ (an uninterrupted
        reference); else it resumes from the checkpoints. Returns where its events go."""
        # Apart through the node wire (LAB_EVENTS_DIR, LAB_CKPT_DIR), as every workload reads it:
        # the runtime knows no script's flags.
        self.state_dir = self.run_dir.path / fresh if fresh else None
        topology = topology.replace(rdzv_id=f"{topology.rdzv_id}-{fresh or 'rerun'}")
        try:
            for node in self.attach():
                node.start(self.node_argv(topology, node, script, list(script_args)))
        finally:
            self.state_dir = None
        return self.run_dir.path / (fresh or "") / "events"

    def locate_script(self, script: str) -> str:
        """The script as the nodes will run it: a file of this machine (made absolute), which
        every runtime's nodes can reach; a runtime whose nodes see only their image says so."""
        path = Path(script)
        if not path.is_file():
            raise LabError(f"script not found: {script}")
        return str(path.resolve())

    @classmethod
    def network_fault_refusal(cls, args: argparse.Namespace) -> str:
        """Why a node of this runtime, with these flags, cannot be cut off the network; "" when it can."""
        return cls.NODE.refusal("partition") if cls.NODE is not None else f"the {cls.name} runtime has no nodes"

    @classmethod
    def refuse_script_drill(cls, args: argparse.Namespace) -> None:
        """Refuse, in one line before anything starts, a drill on a user's script that this
        runtime cannot run with these flags (SCRIPT_DRILLS_NEED says what it takes)."""
        return None

    def script_workdir(self, label: str) -> Path:
        """Where one drill run of a user's script works, as its nodes see the path: a fresh
        folder per run, so no run sees another's checkpoints (`lab down` removes it)."""
        return self.run_dir.path / "work" / label

    def script_workdir_note(self) -> str:
        """Why the nodes of one drill run do not share its working dir, for the verdict to say when
        ranks resume apart; "" where they share it (one folder of this machine, mounted in every node)."""
        return ""

    def describe(self, node: Node) -> str:
        """Where the node runs, in a few words (for `lab up` and the dry run)."""
        return self.name

    def checkpoint_dir(self) -> str:
        """Where a node's trainer keeps its checkpoints, as the node sees the path."""
        return str(self.run_dir.path / "checkpoints")

    def checkpoints_shared(self) -> bool:
        """Whether every node of this lab sees one checkpoints folder (SHARED_CHECKPOINTS)."""
        return self.SHARED_CHECKPOINTS

    def gather(self) -> None:  # noqa: B027  # a hook: most runtimes' nodes write where the lab reads
        """Bring what the nodes wrote into the run dir now, and what the lab wrote for them to them."""

    def apart(self) -> list[str]:
        """The nodes up now that do not see this machine's run dir (a Ray machine's own disk)."""
        return []

    def node_env(self, node: Node) -> dict[str, str]:
        """Where a node's agent and workloads keep their state: all under the run directory
        (a fresh rerun's under its own folder there, state_dir)."""
        home = self.state_dir or self.run_dir.path
        return NodeEnv(
            events_dir=str(home / "events"),
            ckpt_dir=str(home / "checkpoints") if self.state_dir else self.checkpoint_dir(),
            # Where every node sees the run dir's one checkpoints folder, only rank 0 writes it;
            # else each node keeps its own (peer recovery).
            ckpt_shared=self.checkpoints_shared(),
            targets_dir=str(self.run_dir.path / "prometheus" / "targets"),
            workers_file=str(node.dir / WORKERS_FILE),
        ).render()

    def node_argv(self, topology: Topology, node: Node, script: str, script_args: list[str]) -> list[str]:
        """The node's agent command: lab.node.launch around torchrun, with node_env."""
        return topology.launch_argv(
            node.index, script, script_args, log_dir=str(node.dir / "torchelastic"), extra_env=self.node_env(node)
        )
