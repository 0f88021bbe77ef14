"""The Ray runtime: one lab node per machine of an existing Ray cluster.

    lab up --runtime ray --ray-address auto|HOST:PORT

The driver (this process, on a machine of the cluster) reserves one bundle per lab node
in a STRICT_SPREAD placement group, so no two nodes share a machine, and places a
`MachineAgent` actor in each (lab.runtimes.ray_node). Ray numbers the bundles in no
particular machine order, so node i goes on the bundle of the i-th machine by address:
the same cluster gets the same placement every time, node 0 on its lowest address.
Each actor starts its machine's `python -m lab.node.launch`, with node 0's address, as the
actor reports it, as the c10d endpoint. Actors and the group are detached and named, so
`lab status` and `lab down` find them from any shell on the cluster, and `lab down`
removes exactly them.

Like any multi-node torchrun job with checkpoints, the run directory (checkpoints,
events, logs) must be one directory every machine sees at the same path (NFS, or one
disk, as the tests' machines share). The lab's Prometheus runs beside the driver and
finds every exporter through the file_sd targets the exporters write there.
"""

from __future__ import annotations

import argparse
from typing import Any

from lab.errors import LabError
from lab.health import prometheus
from lab.options import Option
from lab.rundir import RunDir
from lab.runtimes import ray_follower, ray_mirror
from lab.runtimes import state as runstate
from lab.runtimes.base import Log, Node
from lab.runtimes.monitored import MonitoredRuntime
from lab.runtimes.plan import LaunchPlan
from lab.runtimes.ray_calls import BUNDLE, bundles_by_address, check_reachable, connect, machines, ray_get
from lab.runtimes.ray_node import ACTOR_NAMESPACE, MachineAgent, RayNode, actor_name, recorded_actors
from lab.runtimes.state import RunState
from lab.runtimes.tempdirs import remove_temp_dirs, temp_dir
from lab.topology import Topology

RAY_ADDRESS = Option(
    "--ray-address",
    "the Ray cluster: the ray runtime places one node on each of its machines; "
    "a drill on another runtime joins it instead of starting a local Ray",
    metavar="auto|HOST:PORT",
)


def placement_group_name(lab_id: str) -> str:
    return f"tlab-{lab_id}-nodes"


class RayRuntime(MonitoredRuntime):
    name = "ray"
    NODE = RayNode
    OPTIONS = (RAY_ADDRESS, *MonitoredRuntime.OPTIONS)
    DRILLS = True
    DOCTOR = True  # its probes meet in the run dir: refused where a machine has a disk of its own
    MACHINES_ELSEWHERE = True
    NODES_ARE = "Ray machines"
    RDZV_BACKENDS = ("c10d", "lab")  # node0's agent hosts either store on its machine

    def __init__(
        self,
        run_dir: RunDir,
        *,
        ray_address: str | None = None,
        log: Log = print,
        monitoring: str = "auto",
        prometheus_port: int | None = None,
    ):
        super().__init__(run_dir, log=log, monitoring=monitoring, prometheus_port=prometheus_port)
        self.ray_address = ray_address
        self.mirror: ray_mirror.Mirror | None = None  # where some machine has a disk of its own

    @classmethod
    def from_args(cls, run_dir: RunDir, args: argparse.Namespace, log: Log = print) -> RayRuntime:
        if not args.ray_address:  # before anything starts: there is no Ray cluster to start it on
            raise LabError("the ray runtime needs --ray-address auto|HOST:PORT (a running Ray cluster)")
        check_reachable(args.ray_address)
        return cls(
            run_dir,
            log=log,
            ray_address=args.ray_address,
            monitoring=args.monitoring,
            prometheus_port=args.prometheus_port,
        )

    def describe(self, node: Node) -> str:
        return "Ray machine"

    def node_env(self, node: Node) -> dict[str, str]:
        env = super().node_env(node)
        env["TMPDIR"] = str(temp_dir(self.run_dir.lab_id))  # made and removed on its machine by its agent
        return env

    def plan(self, topology: Topology, script: str, script_args: list[str]) -> LaunchPlan:
        raise LabError("the ray runtime places nodes when it starts them: --dry-run needs another runtime")

    def hosts_up(self, topology: Topology, script: str, script_args: list[str]) -> LaunchPlan:
        """A node's agent placed on each machine, nothing started: the plan is known only now."""
        self.check_rendezvous(topology)
        connect(self.ray_address)
        found = machines()
        if len(found) < topology.nodes:
            raise LabError(
                f"the Ray cluster at {self.ray_address} has {len(found)} machine(s); --nodes "
                f"{topology.nodes} needs {topology.nodes} (one lab node per machine)"
            )
        watch = self.use_prometheus()
        if watch:
            self.claim_prometheus_port()
        url = self.prometheus.url if watch else None
        recorded = RunState(self.name, "machines", topology, script, list(script_args), prometheus=url, own=self._own())
        runstate.save(self.run_dir, recorded)  # first: if anything below fails, `lab down` still knows
        actors = self.place_agents(topology.nodes, ray_mirror.new_share_token(self.run_dir.path))
        where = ray_get([a.where.remote() for a in actors], 120, "the machines' agents to start")
        topology = topology.replace(rdzv_host=where[0]["address"])
        nodes = [
            RayNode(a, f"node{i}", i, w["address"], self.run_dir.path / "nodes" / f"node{i}")
            for i, (a, w) in enumerate(zip(actors, where, strict=True))
        ]
        placed = [
            {"name": n.name, "index": n.index, "address": n.address, "hostname": w["hostname"], "machine": w["machine"]}
            | ({"own_disk": True} if w["own_disk"] else {})
            for n, w in zip(nodes, where, strict=True)
        ]
        recorded.topology, recorded.nodes = topology, placed
        runstate.save(self.run_dir, recorded)
        why = ray_mirror.refusal(nodes, where, topology, script, self.run_dir.path)
        if why:
            raise LabError(why)
        self.mirror_own_disks(nodes, placed)
        if watch:
            self.start_recorded_prometheus(recorded)
        return LaunchPlan(self.name, "machines", topology, script, list(script_args), nodes, "", url, self._own())

    def checkpoints_shared(self) -> bool:
        return not self.apart()

    def gather(self) -> None:
        if self.mirror is not None:
            self.mirror.sync()

    def apart(self) -> list[str]:
        return list(self.mirror.agents) if self.mirror is not None else []

    def mirror_own_disks(self, nodes: list[RayNode], placed: list[dict]) -> None:
        """Copy the files of the nodes whose machines have disks of their own (ray_mirror)."""
        own = {n.name: n.actor for n, p in zip(nodes, placed, strict=True) if p.get("own_disk")}
        if own and self.mirror is None:
            self.mirror = ray_mirror.Mirror(self.run_dir.path, own, self.log)
        for node in nodes:
            node.mirror = self.mirror if node.name in own else None

    def start_nodes(self, plan: LaunchPlan) -> None:
        super().start_nodes(plan)
        if self.mirror is not None:
            ray_follower.start_follower(self.run_dir.path)

    def _own(self) -> dict[str, Any]:
        return {"ray_address": self.ray_address}

    def place_agents(self, count: int, share_token: str) -> list[Any]:
        """One MachineAgent actor per node, each on a machine of its own (a detached placement
        group, named in the lab's namespace so that `lab down` finds it from any shell)."""
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        group = placement_group(
            [dict(BUNDLE)] * count,
            strategy="STRICT_SPREAD",
            name=placement_group_name(self.run_dir.lab_id),
            lifetime="detached",
        )
        if not group.wait(timeout_seconds=60):
            raise LabError(f"Ray could not place {count} nodes on {count} machines within 60 s")
        agent: Any = ray.remote(num_cpus=BUNDLE["CPU"], max_restarts=0)(MachineAgent)
        return [
            agent.options(
                name=actor_name(self.run_dir.lab_id, i),
                namespace=ACTOR_NAMESPACE,
                lifetime="detached",
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=b),
            ).remote(str(self.run_dir.path), f"node{i}", i, self.run_dir.lab_id, share_token)
            for i, b in enumerate(bundles_by_address(group))
        ]

    def use_prometheus(self) -> bool:
        missing = prometheus.INSTALL_HINT if prometheus.binary() is None else None
        return prometheus.wanted(self.monitoring, missing, self.log)

    def attach(self) -> list[RayNode]:
        state = self.run_dir.read_state() or {}
        if state.get("runtime") != self.name or not state.get("nodes"):
            return []
        connect(state.get("ray_address"))
        nodes = self._recorded_nodes(state)
        gone = [n["name"] for n in state["nodes"] if n["name"] not in {node.name for node in nodes}]
        if gone:
            raise LabError(f"{', '.join(gone)}: the actor is gone from the Ray cluster")
        self.mirror_own_disks(nodes, state["nodes"])
        if self.mirror is not None:
            self.mirror.sync()  # what the nodes wrote since this run dir last heard from them
        return nodes

    def _recorded_nodes(self, state: dict) -> list[RayNode]:
        """Handles of the recorded nodes whose actors the cluster still has."""
        actors = recorded_actors(self.run_dir.lab_id, state.get("nodes", []))
        return [
            RayNode(actors[n["name"]], n["name"], n["index"], n["address"], self.run_dir.path / "nodes" / n["name"])
            for n in state.get("nodes", [])
            if n["name"] in actors
        ]

    def down(self, grace_s: float = 10.0) -> list[str]:
        """Stop every node through its actor, then remove the actors, the placement group,
        Prometheus and the run directory."""
        state = self.run_dir.read_state() or {}
        if state.get("runtime") != self.name:
            return []
        import ray
        from ray.util.placement_group import get_placement_group, remove_placement_group

        removed = []
        try:
            connect(state.get("ray_address"))
        except LabError as e:
            self.log(
                f"note: {e}; the lab's actors, if any, are left to the cluster, and the other machines' node temp "
                f"dirs ({temp_dir(self.run_dir.lab_id)}) to them"
            )
        if ray.is_initialized():
            for node in self._recorded_nodes(state):
                try:
                    node.stop(grace_s)
                    removed += [
                        f"{d} on {node.address}"
                        for d in ray_get(node.actor.cleanup.remote(), 60, f"{node.name}'s cleanup")
                    ]
                finally:
                    ray.kill(node.actor)
                removed.append(f"actor {actor_name(self.run_dir.lab_id, node.index)} ({node.name} on {node.address})")
            group_name = placement_group_name(self.run_dir.lab_id)
            try:
                remove_placement_group(get_placement_group(group_name))
                removed.append(f"placement group {group_name}")
            except ValueError:
                pass
        from lab import procs

        stray = procs.marked_pids(str(self.run_dir.path))  # this machine's: Prometheus, a node left behind
        procs.terminate(stray, grace_s=2.0, run_dir=str(self.run_dir.path))
        removed += [f"process {pid}" for pid in stray]
        if not ray.is_initialized():  # no actor can clean up: this machine's node temp dirs, at least
            removed += remove_temp_dirs(self.run_dir.lab_id)
        return removed + self.run_dir.take_down()
