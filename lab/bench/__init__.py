"""Measurements, each side by side with its reference in the same run (machines here are noisy)."""

from lab.options import Option
from lab.runtimes.ports import PortInUse, free_port  # noqa: F401  # free_port: the benches' and tests' one way to pick a port

TRIALS = Option("--trials", "how many times each side is measured (default %(default)s)", 3, int)
CAMPAIGN_LOAD = 2  # busy processes beside `lab bench chaos`'s campaigns and the loaded single-fault benches
QUIET_GOALS = "- Goals are judged on the quiet machine's figures; these are what a campaign as busy is projected from."
LOAD_HELP = (  # lab.chaos.schedule.LOAD's help on a bench
    "busy processes beside every trial, as `lab chaos --load` puts them beside a campaign; the figures are "
    "saved as NAME-loadN, which `lab bench goodput --chaos-json` projects a campaign of that load from "
    "(default %(default)s)"
)
BENCH_RUNTIMES = Option("--runtimes", "where the bench runs, comma-separated (default %(default)s)", "local")


def loaded(name: str, load: int) -> str:
    """A bench's result name at a load: recovery, recovery-load2."""
    return f"{name}-load{load}" if load else name


def beside(load: int) -> str:
    """The words a loaded bench's table opens with."""
    return f"Beside {load} busy process(es) (--load {load}): " if load else ""


def up_on_its_own_port(runtime, topology, script: str, args: list[str], tries: int = 3):
    """runtime.up of a bench's job whose rendezvous port is the bench's own pick (free_port). A
    port found free can be taken before the lab checks it (on loopback hosts, by anything else on
    the machine: CI runs' stragglers and coordinators benches were refused 61921 and 61415), and
    then the bench picks another, as the lab does for a Prometheus port it chose."""
    for _ in range(tries - 1):
        try:
            return runtime.up(topology, script, args)
        except PortInUse as e:
            if e.option != "--rdzv-port":
                raise
            topology = topology.replace(rdzv_port=free_port())
    return runtime.up(topology, script, args)
