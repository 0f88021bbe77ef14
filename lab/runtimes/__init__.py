"""Where the lab's nodes run. Each runtime hands out the same `Node` handle."""

from __future__ import annotations

from lab.errors import LabError

RUNTIME_NAMES = ("auto", "local", "docker", "k8s", "ray")


def create(name: str, run_dir, *, hosts: str = "auto", log=print, **options):
    """The runtime called `name`. "auto" is the local runtime; docker, k8s and ray are chosen by
    name (`make lab-up` picks docker when a daemon answers)."""
    if name not in RUNTIME_NAMES:
        raise LabError(f"unknown runtime {name!r}; choose one of: {', '.join(RUNTIME_NAMES)}")
    if name == "k8s":
        from lab.runtimes.k8s import KubernetesRuntime

        k8s_options = {k: options[k] for k in ("context", "namespace", "overlay") if options.get(k)}
        return KubernetesRuntime(run_dir, log=log, **k8s_options)
    if name == "ray":
        from lab.runtimes.ray_runtime import RayRuntime

        ray_options = {k: v for k, v in options.items() if k in ("monitoring", "prometheus_port", "ray_address")}
        return RayRuntime(run_dir, log=log, **ray_options)
    if name == "docker":
        from lab.runtimes.docker_runtime import DockerRuntime

        docker_options = {k: v for k, v in options.items() if k in ("monitoring", "prometheus_port", "image")}
        return DockerRuntime(run_dir, log=log, **docker_options)
    from lab.runtimes.local import LocalRuntime

    local_options = {k: v for k, v in options.items() if k in ("monitoring", "prometheus_port")}
    return LocalRuntime(run_dir, hosts=hosts, log=log, **local_options)


def for_run_dir(run_dir, log=print):
    """The runtime that started the lab recorded in run_dir (local when none is recorded)."""
    state = run_dir.read_state() or {}
    return create(state.get("runtime", "local"), run_dir, log=log)


def refuse_if_running(runtime, log) -> None:
    """Refuse while a lab of this run directory runs, on whatever runtime started it; clean up
    what a crashed one left (the recorded runtime's, then this runtime's own leftovers)."""
    # Only a recorded lab can be another runtime's; with none, this runtime clears its own leftovers.
    previous = for_run_dir(runtime.run_dir, log=log) if runtime.run_dir.read_state() else runtime
    if any(node.exit_code() is None for node in previous.attach()):
        raise LabError(f"a lab is already running (run dir {runtime.run_dir.path}, runtime {previous.name}); "
                       "stop it with `lab down`")
    leftovers = previous.down(grace_s=2.0)
    if previous.name != runtime.name:
        leftovers += runtime.down(grace_s=2.0)
    if leftovers:
        log(f"removed leftovers of an earlier lab: {', '.join(leftovers)}")
