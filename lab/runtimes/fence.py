"""The fence around a lab's hosts: only the lab's own hosts and the lab's user reach them.

The lab's control ports carry no authentication and unpickle what they read: node 0's
c10d store, the lab's etcd (v2, no auth), the exporters. The root agents that read
them would run whatever a local user wrote there. On netns hosts (and Docker's bridge
networks) every local user could reach them through the host's address on the bridge,
so each lab adds, tagged with its lab id (`torchrun-lab:<id>`) and removed by `lab down`:

- OUTPUT: a new connection from this machine into the lab's subnet is rejected unless
  it comes from the lab's uid (root, for netns hosts): no other user's process gets in;
- FORWARD: the bridge's own traffic is accepted (dockerd's DROP policy would drop it),
  and anything routed into the bridge from elsewhere (another namespace, a container
  on another network) is rejected: only the lab's own hosts talk to each other.

The rules are inserted first in their chain, so a broader ACCEPT further down never
opens the fence. docs/reliability.md says what each runtime exposes, and to whom.
"""

from __future__ import annotations

import os
import shlex
import shutil

from lab.errors import LabError
from lab.runtimes.hostcmd import TIMEOUT_S, must, query

RULE_COMMENT = "torchrun-lab"
# DOCKER-USER: where a misconfiguration drill drops a container's connections (lab.runtimes.misconfig).
CHAINS = ("FORWARD", "OUTPUT", "DOCKER-USER")


def comment(lab_id: str) -> str:
    return f"{RULE_COMMENT}:{lab_id}"


def rules(lab_id: str, subnet: str, bridge: str | None = None) -> list[list[str]]:
    """The rules for one lab: subnet like 10.213.7.0/24; bridge when the lab owns the bridge."""
    tag = ["-m", "comment", "--comment", comment(lab_id)]
    others = ["-m", "owner", "!", "--uid-owner", str(os.geteuid())]
    found = [["OUTPUT", "-d", subnet, "-m", "conntrack", "--ctstate", "NEW", *others, *tag, "-j", "REJECT"]]
    if bridge:
        found += [
            ["FORWARD", "-i", bridge, "-o", bridge, *tag, "-j", "ACCEPT"],
            ["FORWARD", "!", "-i", bridge, "-o", bridge, *tag, "-j", "REJECT"],
        ]
    return found


def install(lab_id: str, subnet: str, bridge: str | None = None) -> None:
    """Insert the lab's rules at the top of their chains; without iptables there is no fence to
    build, and nothing of ours could be dropping the bridge's traffic either: say so."""
    if shutil.which("iptables") is None:
        raise LabError("netns hosts need iptables to fence the lab's ports from other users (apt-get install iptables)")
    for rule in reversed(rules(lab_id, subnet, bridge)):
        must("iptables", "-w", str(TIMEOUT_S), "-I", rule[0], "1", *rule[1:])


def find(lab_id: str | None) -> list[str]:
    """The lab's rules now (every lab's when lab_id is None), as `iptables -S` prints them."""
    if shutil.which("iptables") is None:
        return []
    found = []
    for chain in CHAINS:
        out = query("iptables", "-w", str(TIMEOUT_S), "-S", chain)
        for line in out.splitlines():
            words = shlex.split(line)  # iptables quotes the comment: "torchrun-lab:<id>"
            tag = words[words.index("--comment") + 1] if "--comment" in words[:-1] else ""
            if tag == comment(lab_id or "") or (lab_id is None and tag.startswith(f"{RULE_COMMENT}:")):
                found.append(line)
    return found


def remove(lab_id: str) -> list[str]:
    removed = find(lab_id)
    for rule in removed:
        query("iptables", "-w", str(TIMEOUT_S), "-D", *shlex.split(rule)[1:])
    return [f"iptables rule {rule}" for rule in removed]
