"""What `lab doctor` asks on each node, before any job: run there as the node's command.

    python -m lab.node.doctor_probe --dir D --node NAME --index I --nodes N --rdzv-host H --rdzv-port P
        [--env NAME=VALUE ...]

Two rounds through a folder every node of the lab sees (the run dir): each node writes what it
knows of itself (D/NAME.json: its hostname and what that resolves to, the address gloo would give
its peers, listening there, the torch it has, /dev/shm, its open-file limit), waits for the others',
then tries each peer the way a job would (D/NAME.reach.json: a TCP connection to the address the
peer gives, the rendezvous host resolved and connected to, how long a reverse lookup of each peer
takes), and waits for every node to finish before it stops listening. Node 0 holds the rendezvous
port itself meanwhile, as the c10d store would. It imports no torch: a probe takes a fraction of
a second. The judgement is the controller's (lab.doctor.findings).
"""

from __future__ import annotations

import argparse
import fcntl
import importlib.metadata
import json
import os
import resource
import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lab import files
from lab.node.launch import apply_env

IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
CONNECT_S = 2.0  # a peer that does not answer in this long is as good as dropped
LOOKUP_CAP_S = 6.0  # a reverse lookup is timed up to this, then given up on


def interface_address(name: str) -> str | None:
    """The IPv4 address of a network interface, or None (no such interface, or no address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))  # SIOCGIFADDR
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def resolve(name: str) -> tuple[list[str], str]:
    """The addresses a name resolves to, in getaddrinfo's order, and the error if it does not."""
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except OSError as e:
        return [], str(e)
    return list(dict.fromkeys(str(info[4][0]) for info in infos)), ""


def advertised(hostname_addresses: list[str]) -> tuple[str | None, socket.socket | None, str]:
    """The address gloo would give its peers, listening there as gloo would, and why that one: the
    interface GLOO_SOCKET_IFNAME names, else the first address the hostname resolves to that this
    node can listen on."""
    ifname = os.environ.get("GLOO_SOCKET_IFNAME")
    if ifname:
        address = interface_address(ifname.split(",")[0])
        return address, listen(address) if address else None, f"GLOO_SOCKET_IFNAME={ifname}"
    for address in hostname_addresses:
        listening = listen(address)
        if listening:
            return address, listening, "hostname"
    return None, None, "hostname"


def listen(address: str, port: int = 0) -> socket.socket | None:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((address, port))
        s.listen(64)
    except OSError:
        s.close()
        return None
    threading.Thread(target=_accept_forever, args=(s,), daemon=True).start()
    return s


def _accept_forever(s: socket.socket) -> None:
    while True:
        try:
            s.accept()[0].close()
        except OSError:
            return


def self_facts(args: argparse.Namespace) -> tuple[dict, list[socket.socket]]:
    """This node as its peers will meet it, and the sockets it listens on for them."""
    hostname = socket.gethostname()
    addresses, error = resolve(hostname)
    address, listener, source = advertised(addresses)
    listening = [listener] if listener else []
    facts = {
        "node": args.node,
        "index": args.index,
        "hostname": hostname,
        "hostname_addresses": addresses,
        "hostname_error": error,
        "advertised": address,
        "advertised_from": source,
        "port": listening[0].getsockname()[1] if listening else None,
        "interfaces": sorted(name for _, name in socket.if_nameindex()),
        "ifnames": {v: os.environ[v] for v in IFNAME_VARIABLES if os.environ.get(v)},
        "torch": _version("torch"),
        "shm_bytes": _shm_bytes(),
        "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "net_ns": _net_namespace(),
    }
    if args.index == 0:  # the store's port, held as the store would hold it
        store = listen("0.0.0.0", args.rdzv_port)
        facts["rdzv_port_free"] = store is not None
        listening += [store] if store else []
    return facts, listening


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _shm_bytes() -> int | None:
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return st.f_frsize * st.f_blocks


def _net_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/net")
    except OSError:
        return ""


def connect(address: str | None, port: int | None) -> tuple[str, float]:
    """ "ok" or why not, and how long it took."""
    if not address or not port:
        return "nothing to connect to", 0.0
    started = time.monotonic()
    try:
        with socket.create_connection((address, port), timeout=CONNECT_S):
            return "ok", time.monotonic() - started
    except TimeoutError:
        return f"no answer in {CONNECT_S:g} s", time.monotonic() - started
    except OSError as e:
        return e.strerror or str(e), time.monotonic() - started


def reverse_lookup_s(address: str | None) -> float | None:
    """How long the name of an address takes to look up (capped at LOOKUP_CAP_S)."""
    if not address:
        return None
    started = time.monotonic()
    worker = threading.Thread(target=_lookup, args=(address,), daemon=True)
    worker.start()
    worker.join(LOOKUP_CAP_S)
    return time.monotonic() - started


def _lookup(address: str) -> None:
    try:
        socket.gethostbyaddr(address)
    except OSError:
        pass


def reach(args: argparse.Namespace, peers: dict[str, dict]) -> dict:
    """Each peer as a job would meet it (all at once: a slow lookup is paid once, not per peer),
    and the rendezvous host as torch's store client meets it: each address the name resolves to,
    in turn, until one answers."""
    rdzv_addresses, rdzv_error = resolve(args.rdzv_host)
    store = next((p for p in peers.values() if p["index"] == 0), None)
    rdzv = "not tried: node 0's probe did not report"
    if store and store.get("rdzv_port_free") and rdzv_addresses:
        tried = [connect(address, args.rdzv_port)[0] for address in rdzv_addresses]
        rdzv = "ok" if "ok" in tried else tried[0]
    others = {name: p for name, p in peers.items() if name != args.node}
    with ThreadPoolExecutor(max_workers=max(1, 2 * len(others))) as pool:
        connects = {name: pool.submit(connect, p["advertised"], p["port"]) for name, p in others.items()}
        lookups = {name: pool.submit(reverse_lookup_s, p["advertised"]) for name, p in others.items()}
        met = {name: {"connect": connects[name].result()[0], "lookup_s": lookups[name].result()} for name in others}
    return {
        "node": args.node,
        "peers": met,
        "rdzv_addresses": rdzv_addresses,
        "rdzv_error": rdzv_error,
        "rdzv_connect": rdzv,
    }


def gathered(directory: Path, suffix: str, count: int, wait_s: float) -> dict[str, dict]:
    """The nodes' files with this suffix, once all `count` are there or wait_s has passed."""
    deadline = time.monotonic() + wait_s
    while True:
        found = {}
        for path in directory.glob(f"*{suffix}"):
            text = files.read_text(path, 1 << 20)
            if text:
                record = json.loads(text)
                found[record["node"]] = record
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.node.doctor_probe")
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--rdzv-host", required=True)
    parser.add_argument("--rdzv-port", type=int, required=True)
    parser.add_argument("--wait-s", type=float, default=10.0)
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="as the job's node gets it")
    args = parser.parse_args(argv)
    # The environment the job's agent would set (lab.node.launch: the user's own values kept), so
    # the probe meets what the job meets (a userns node's GLOO_SOCKET_IFNAME=lo, say).
    apply_env(dict(pair.partition("=")[::2] for pair in args.env), os.environ, log=lambda line: None)
    args.dir.mkdir(parents=True, exist_ok=True)  # by the node: a container's user may write it
    facts, listening = self_facts(args)
    files.write_text(args.dir / f"{args.node}.json", json.dumps(facts))
    peers = gathered(args.dir, ".json", args.nodes, args.wait_s)
    files.write_text(args.dir / f"{args.node}.reach", json.dumps(reach(args, peers)))
    gathered(args.dir, ".reach", args.nodes, args.wait_s + LOOKUP_CAP_S)  # listen until every node is done
    for s in listening:
        s.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
