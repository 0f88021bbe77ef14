"""The docker runtime's Prometheus: a container of the lab's on its network, published on
127.0.0.1 only, its config, alert rules and live view mounted read-only from the run directory.
`lab down` removes it with the lab's other labelled containers."""

from __future__ import annotations

import shutil

from lab.errors import LabError
from lab.health import prometheus
from lab.runtimes import docker_engine as engine
from lab.runtimes.base import Log


def wanted(docker, monitoring: str, log: Log) -> bool:
    """Whether the lab runs one: --prometheus, and whether its image is there."""
    from docker.errors import ImageNotFound

    missing = None
    if monitoring != "off":
        try:
            docker.images.get(engine.PROMETHEUS_IMAGE)
        except ImageNotFound:
            missing = f"image {engine.PROMETHEUS_IMAGE} not found: build it with `make images`"
    return prometheus.wanted(monitoring, missing, log)


def start(docker, prom: prometheus.Prometheus, run_path: str, network: str, name: str, log: Log) -> None:
    """Prometheus on the lab's network, its config and the alert rules from the run directory."""
    rules = prom.dir / "rules.yml"
    prom.dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(prometheus.RULES, rules)
    consoles = prom.dir / "consoles"  # the live view, mounted with the rest
    shutil.copytree(prometheus.CONSOLES, consoles, dirs_exist_ok=True)
    prom.write_config(rules=rules)
    container = docker.containers.run(
        engine.PROMETHEUS_IMAGE,
        [
            f"--config.file={prom.config_path}",
            "--storage.tsdb.path=/tmp/prometheus",
            "--web.listen-address=0.0.0.0:9090",
            "--log.level=warn",
            *prometheus.console_flags(consoles),
        ],
        name=name,
        hostname="prometheus",
        network=network,
        detach=True,
        labels={engine.LABEL: run_path},
        volumes={str(prom.dir): {"bind": str(prom.dir), "mode": "ro"}},
        ports={"9090/tcp": ("127.0.0.1", prom.port)},
        **engine.HARDENED,
        tmpfs={"/tmp": ""},
    )
    prom.wait_ready(30, lambda: container.logs().decode(errors="replace"))
    log(f"started Prometheus in container {name} ({engine.PROMETHEUS_IMAGE})")


def kill(docker, name: str) -> None:
    """SIGKILL the container, as a crash would (a fault: `lab bench coordinators`)."""
    from docker.errors import NotFound

    try:
        docker.containers.get(name).kill(signal="SIGKILL")
    except NotFound:
        raise LabError(f"no Prometheus container of this lab runs ({name})") from None
