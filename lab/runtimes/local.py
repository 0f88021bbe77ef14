"""The local runtime: every node on this machine, each a real host when it can be.

As root with iproute2, each node gets its own network namespace, address and
hostname (see lab.runtimes.netns). Otherwise the nodes share one loopback: inside an
unprivileged user+network namespace of their own where the kernel allows it (see
lab.runtimes.userns: nothing they listen on is reachable from the LAN), else the
host's, and the lab says so. That still runs a multi-node rendezvous, but no network
fault can be injected.
"""

from __future__ import annotations

import argparse
import os

from lab import gpus, procs
from lab.errors import LabError
from lab.health import prometheus
from lab.nodeenv import NodeEnv
from lab.options import Option
from lab.rundir import RunDir
from lab.runtimes import etcd, memory, netns, userns
from lab.runtimes.base import Log, Node
from lab.runtimes.dry_run import plan_text
from lab.runtimes.local_node import LocalNode
from lab.runtimes.monitored import MonitoredRuntime
from lab.runtimes.plan import LaunchPlan
from lab.runtimes.ports import ensure_port_free, exporter_ports, free_etcd_port, holder
from lab.runtimes.tempdirs import make_private_dir, remove_temp_dirs, temp_dir
from lab.topology import RDZV_BACKENDS, Topology

HOST_MODES = ("auto", "netns", "userns", "loopback")
HOSTS = Option(
    "--hosts",
    "netns hosts (root), one unprivileged namespace (userns), or processes on loopback (default: netns when possible)",
    "auto",
    choices=HOST_MODES,
)


class LocalRuntime(MonitoredRuntime):
    name = "local"
    NODE = LocalNode
    OPTIONS = (HOSTS, *MonitoredRuntime.OPTIONS)
    DRILLS = True
    CHAOS = True
    DOCTOR = True
    NODES_ARE = "netns hosts"
    HOST_CODE = True
    AUTO = True
    RDZV_BACKENDS = RDZV_BACKENDS  # every one: etcd-v2's server runs beside the nodes
    NO_IN_PROCESS = ""  # node 0's keeper hosts the store on the lab's network, as its agent would

    def __init__(
        self,
        run_dir: RunDir,
        *,
        hosts: str = "auto",
        log: Log = print,
        monitoring: str = "auto",
        prometheus_port: int | None = None,
    ):
        if hosts not in HOST_MODES:
            raise LabError(f"--hosts must be one of {', '.join(HOST_MODES)}; got {hosts!r}")
        super().__init__(run_dir, log=log, monitoring=monitoring, prometheus_port=prometheus_port)
        self.hosts = hosts
        self._net: netns.LabNet | None = None
        self._userns_pid: int | None = None

    @classmethod
    def network_fault_refusal(cls, args: argparse.Namespace) -> str:
        hosts = getattr(args, "hosts", "auto")
        if hosts in ("loopback", "userns"):
            return f"--hosts {hosts}: the nodes share one network, which no fault can cut (--hosts netns)"
        reason = netns.unavailable_reason()
        return f"network faults need netns hosts: {reason}" if reason else ""

    @property
    def net(self) -> netns.LabNet:
        """This lab's netns hosts: named by the run dir's lab id, on the subnet recorded at `up`."""
        if self._net is None:
            recorded = (self.run_dir.read_state() or {}).get("subnet")
            self._net = netns.for_lab(self.run_dir.lab_id, recorded)
        return self._net

    def describe(self, node: Node) -> str:
        netns_name = getattr(node, "netns", None)
        return f"netns {netns_name}, hostname {node.name}" if netns_name else "loopback"

    def node_env(self, node: Node) -> dict[str, str]:
        assert isinstance(node, LocalNode)
        env = super().node_env(node)
        if node.netns is None:  # loopback nodes share the host's network: keep the exporters off the LAN
            env.update(NodeEnv(exporter_addr="127.0.0.1").render())
        else:  # the bridge, in the host's namespace: the round trip that names a slow network
            env.update(NodeEnv(net_probe=self.net.gateway).render())
        if node.userns_pid is not None:  # the namespace has loopback only, whatever the hostname says
            env["GLOO_SOCKET_IFNAME"] = "lo"
        # torchelastic and multiprocessing leave files in the temp dir (pytorch-errorfile-*.pickle
        # of killed workers, say): the lab's own, removed by `lab down`. Short: it holds sockets.
        env["TMPDIR"] = str(temp_dir(self.run_dir.lab_id))
        return env

    def use_prometheus(self, mode: str = "netns") -> bool:
        missing = prometheus.INSTALL_HINT if prometheus.binary() is None else None
        if mode == "userns":
            missing = (
                "the host's Prometheus cannot reach nodes in their own network namespace "
                "(--hosts loopback to watch them)"
            )
        return prometheus.wanted(self.monitoring, missing, self.log)

    def host_mode(self) -> str:
        reason = netns.unavailable_reason()
        if self.hosts == "netns" and reason:
            raise LabError(f"netns hosts need root and iproute2: {reason}")
        wants_userns = self.hosts == "userns" or (self.hosts == "auto" and reason is not None)
        closed = userns.unavailable_reason() if wants_userns else None
        if self.hosts == "userns" and closed:
            raise LabError(f"userns hosts need an unprivileged user namespace: {closed}")
        if wants_userns and not closed:
            self.log(
                f"note: the nodes share one unprivileged network namespace of their own ({reason or 'asked for'}"
                "; loopback inside, closed to the LAN); network faults are unavailable"
            )
            return "userns"
        if self.hosts == "auto" and reason:
            self.log(f"note: nodes run as processes on loopback ({reason}); network faults are unavailable")
        if self.hosts == "loopback" or reason:
            self.log(
                "note: on loopback the exporters listen on 127.0.0.1 only, but torch's c10d store listens on "
                "all interfaces (and unpickles what it reads): use it on a trusted network"
            )
        return "loopback" if self.hosts == "loopback" or reason else "netns"

    def plan(self, topology: Topology, script: str, script_args: list[str]) -> LaunchPlan:
        mode = self.host_mode()
        topology, nodes = self.layout(topology, mode)
        text = plan_text(self, topology, nodes, script, script_args, wrapper=lambda n: n.wrapper())
        return LaunchPlan(self.name, mode, topology, script, list(script_args), nodes, text)

    def layout(self, topology: Topology, mode: str) -> tuple[Topology, list[LocalNode]]:
        """The nodes and the topology as they will run, without starting anything."""
        nodes = []
        for i in range(topology.nodes):
            host = self.net.host(i) if mode == "netns" else None
            nodes.append(
                LocalNode(
                    name=f"node{i}",
                    index=i,
                    address=host.address if host else "127.0.0.1",
                    netns=host.netns if host else None,
                    dir=self.run_dir.path / "nodes" / f"node{i}",
                    run_dir=str(self.run_dir.path),
                    userns_pid=self._userns_pid if mode == "userns" else None,
                )
            )
        if topology.rdzv_backend == "etcd-v2":
            # The lab's etcd runs on the host, outside every node (see lab.runtimes.etcd).
            rdzv_host = self.net.gateway if mode == "netns" else "127.0.0.1"
        else:
            rdzv_host = "node0" if mode == "netns" else "127.0.0.1"
        if mode == "userns":  # the hostname resolves to an address this namespace does not have
            topology = topology.replace(torchrun_extra=(*topology.torchrun_extra, "--local-addr=127.0.0.1"))
        return topology.replace(rdzv_host=rdzv_host), nodes

    def prepare(self, topology: Topology, script: str, script_args: list[str]) -> LaunchPlan:
        memory.check_fits(topology)
        if self.host_mode() == "userns":  # the plan's nodes live in the namespace it holds
            self.run_dir.claim()
            self._userns_pid = userns.start_holder(str(self.run_dir.path), self.run_dir.path / "userns.log")
        if topology.rdzv_backend == "etcd-v2":
            etcd.check_installed()
            topology = self._etcd_port(topology)
        plan = self.plan(topology, script, script_args)
        mode, topology = plan.hosts, plan.topology
        watch = self.use_prometheus(mode)
        if watch:
            self.claim_prometheus_port()
        if mode == "loopback":  # (a userns lab's namespace is its own: nothing else listens there)
            # Node 0's store listens on every address, so a listener on any one (another lab's etcd
            # on its network's gateway) takes the port from it: checked where the store binds.
            ensure_port_free("0.0.0.0", topology.rdzv_port, "rendezvous port", "--rdzv-port")
            for port in exporter_ports(topology):
                ensure_port_free("0.0.0.0", port, "exporter port", "--metrics-port")
        plan.prometheus = self.prometheus.url if watch else None
        subnet, holder = self.net.subnet if mode == "netns" else None, self._userns_pid if mode == "userns" else None
        plan.own = {"lab_pid": os.getpid(), "lab_id": self.run_dir.lab_id, "subnet": subnet, "userns_pid": holder}
        return plan

    def _etcd_port(self, topology: Topology) -> Topology:
        """etcd serves on this machine's side of the lab's network, beside every other lab's
        loopback listeners: a rendezvous port taken there gives way to the next free one, said."""
        port = free_etcd_port(topology.rdzv_port)
        if port != topology.rdzv_port:
            self.log(f"port {topology.rdzv_port} is taken{holder(topology.rdzv_port)}: etcd serves on {port}")
        return topology.replace(rdzv_port=port)

    def provision(self, plan: LaunchPlan) -> None:
        topology = plan.topology
        if plan.prometheus:
            state = plan.state()
            self.start_recorded_prometheus(state)
            plan.prometheus = state.prometheus
        if plan.hosts == "netns":
            self.net.create(topology.nodes)
        if topology.rdzv_backend == "etcd-v2":
            url = etcd.start(self.run_dir.path / "etcd", topology.rdzv_host, topology.rdzv_port, str(self.run_dir.path))
            self.log(f"started etcd (v2 API) for the rendezvous at {url}")
        make_private_dir(temp_dir(self.run_dir.lab_id))
        for node in plan.nodes:
            node.dir.mkdir(parents=True, exist_ok=True)

    def node_argv(self, topology: Topology, node: Node, script: str, script_args: list[str]) -> list[str]:
        # Every node is on this machine: each sees its own GPUs (lab.gpus).
        devices = gpus.assign(topology.nodes, topology.node_gpus, gpus.count())[node.index]
        return topology.launch_argv(
            node.index,
            script,
            script_args,
            log_dir=str(node.dir / "torchelastic"),
            extra_env={**self.node_env(node), **gpus.visible_devices(devices), **memory.threads_per_rank(topology)},
        )

    def attach(self) -> list[LocalNode]:
        """The nodes of the lab recorded in the run directory (from any shell)."""
        state = self.run_dir.read_state() or {}
        return [
            LocalNode(
                name=n["name"],
                index=n["index"],
                address=n["address"],
                netns=n["netns"],
                dir=self.run_dir.path / "nodes" / n["name"],
                run_dir=str(self.run_dir.path),
                userns_pid=state.get("userns_pid"),
            )
            for n in state.get("nodes", [])
        ]

    def down(self, grace_s: float = 10.0) -> list[str]:
        """Stop and remove everything the local runtime made, found by name and mark."""
        removed = []
        for node in self.attach():
            if node.exit_code() is None:
                node.stop(grace_s)
                removed.append(f"node {node.name}")
        stray = procs.marked_pids(str(self.run_dir.path))
        procs.terminate(stray, grace_s=2.0, run_dir=str(self.run_dir.path))
        removed += [f"process {pid}" for pid in stray]
        if not self.run_dir.is_marked():
            return removed  # no lab was ever made here: it has no hosts and no id to find them by
        if netns.unavailable_reason() is None:
            removed += netns.destroy(self.run_dir.lab_id)
        removed += remove_temp_dirs(self.run_dir.lab_id)
        return removed + self.run_dir.take_down()
