"""A runtime whose lab runs its own Prometheus beside the nodes (local, docker, ray): its flags,
and the port it serves on, claimed as the lab starts it."""

from __future__ import annotations

from typing import ClassVar

from lab import procs
from lab.errors import LabError
from lab.health import prometheus
from lab.options import Option, port
from lab.rundir import RunDir
from lab.runtimes import state as runstate
from lab.runtimes.base import Log, Runtime
from lab.runtimes.ports import ensure_port_free

MONITORING_MODES = ("auto", "on", "off")
MONITORING = Option(
    "--prometheus",
    "start a Prometheus server scraping every rank (auto: when installed; default %(default)s)",
    "auto",
    choices=MONITORING_MODES,
    dest="monitoring",
)
PROMETHEUS_PORT = Option(
    "--prometheus-port",
    "where the lab's Prometheus serves (default: 9090, or the next free port)",
    type=port,
    metavar="PORT",
)


class MonitoredRuntime(Runtime):
    """A runtime whose lab runs its own Prometheus beside the nodes (local, docker, ray)."""

    OPTIONS: ClassVar[tuple[Option, ...]] = (MONITORING, PROMETHEUS_PORT)

    def __init__(
        self, run_dir: RunDir, *, log: Log = print, monitoring: str = "auto", prometheus_port: int | None = None
    ) -> None:
        super().__init__(run_dir, log=log)
        if monitoring not in MONITORING_MODES:
            raise LabError(f"--prometheus must be one of {', '.join(MONITORING_MODES)}; got {monitoring!r}")
        self.monitoring = monitoring
        # The port asked for, else the first free one from 9090 on.
        self.prometheus = prometheus.Prometheus(run_dir.path / "prometheus", port=prometheus_port)

    def claim_prometheus_port(self) -> None:
        """As the lab is about to start Prometheus: a port the lab chose, taken since by a lab
        starting beside this one, gives way to the next free one; a port the user chose and
        something holds is refused in one line."""
        if self.prometheus.chosen_port:
            self.prometheus.port = prometheus.first_free_port(self.prometheus.port)
        else:
            ensure_port_free("127.0.0.1", self.prometheus.port, "Prometheus port", "--prometheus-port")

    def start_recorded_prometheus(self, state: runstate.RunState) -> None:
        """Start the lab's Prometheus and record its address in the run state: another port
        than planned when a lab starting beside this one took the first (Prometheus.start)."""
        self.prometheus.start(str(self.run_dir.path))
        if state.prometheus != self.prometheus.url:
            state.prometheus = self.prometheus.url
            runstate.save(self.run_dir, state)

    def kill_prometheus(self) -> None:
        """SIGKILL the lab's Prometheus, as a crash would (a fault: `lab bench coordinators`)."""
        if not procs.kill_by_command(str(self.run_dir.path), "prometheus"):
            raise LabError("no Prometheus of this lab runs")
