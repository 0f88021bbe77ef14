"""Joining a Ray cluster and asking it, in the lab's terms: one-line errors, deadlines, machines."""

from __future__ import annotations

from lab.errors import LabError

ACTOR_NAMESPACE = "torchrun-lab"  # the lab's actors' Ray namespace: `lab down` finds them from any shell
BUNDLE = {"CPU": 0.01}  # a token share: a node's bundle only pins it to a machine


def connect(address: str | None) -> None:
    """Join the Ray cluster at address, unless this process already has: one-line errors."""
    import ray

    if ray.is_initialized():
        return
    if not address:
        raise LabError("the ray runtime needs --ray-address auto|HOST:PORT (a running Ray cluster)")
    check_reachable(address)
    try:
        ray.init(address=address, namespace=ACTOR_NAMESPACE, log_to_driver=False, configure_logging=False)
    except (ConnectionError, ValueError, RuntimeError) as e:
        raise LabError(f"cannot join the Ray cluster at {address}: {str(e).strip().splitlines()[0]}") from None


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail in one line, at once, when nothing answers at HOST:PORT: ray.init would retry
    for minutes (and it rewrites a loopback address to this machine's own)."""
    import socket

    if address == "auto":
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise LabError(f"--ray-address must be auto or HOST:PORT, got {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise LabError(f"no Ray cluster answers at {address} ({e.strerror or e})") from None


def bundles_by_address(group) -> list[int]:
    """The group's bundle indices, ordered by the address of the machine each was placed on."""
    import ipaddress

    import ray
    from ray.util.placement_group import placement_group_table

    address_of = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    placed = placement_group_table(group)["bundles_to_node_id"]

    def machine_order(bundle: int):
        address = address_of.get(placed[bundle], "")
        try:
            ip = ipaddress.ip_address(address)
            return (0, ip.version, ip, bundle)  # IPv4 before IPv6: the two do not compare
        except ValueError:  # a name, or unknown: after the addresses, still deterministic
            return (1, 0, address, bundle)

    return sorted(placed, key=machine_order)


def ray_get(refs, timeout_s: float, what: str):
    """ray.get with a deadline: a one-line error instead of a wait without end."""
    import ray

    try:
        return ray.get(refs, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise LabError(f"Ray: timed out after {timeout_s:.0f}s waiting for {what}") from None


def machines() -> list[dict]:
    """The cluster's live machines that can hold a lab node."""
    import ray

    return [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) >= BUNDLE["CPU"]]
