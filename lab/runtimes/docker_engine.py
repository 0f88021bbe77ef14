"""Talking to the Docker daemon: the client, the lab's images, and what the lab's objects carry.

Every container and network the Docker runtime makes carries the label
LABEL=<run dir>, so `lab down` removes exactly those, and nothing else on the daemon.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from lab.errors import LabError

LABEL = "torchrun-lab.run-dir"
SOURCE_LABEL = "torchrun-lab.source"  # set by `make images`: the hash of the lab/ it copied
TORCH_LABEL = "torchrun-lab.torch"  # docker/Dockerfile: the image's torch build, cpu or cuda
NODE_IMAGE = os.environ.get("LAB_IMAGE", "torchrun-lab:cpu")
PROMETHEUS_IMAGE = os.environ.get("LAB_PROMETHEUS_IMAGE", "torchrun-lab-prometheus:2.42")
LAB_DIR = Path(__file__).resolve().parents[1]
IMAGE_LAB_DIR = "/opt/torchrun-lab/lab"  # where docker/Dockerfile copies lab/
IMAGE_UID = 10001  # the image's non-root user
# Every container the lab starts: no capabilities (faults signal processes of the same
# user, which needs none), no privilege gain through setuid, a bound on processes, and a
# read-only root (what a node writes goes to its mounts and a tmpfs /tmp).
# A node's store listens on both families; the lab's networks are IPv4 only and so is every
# fence. A container carries no IPv6 (not even link-local), as netns hosts carry none.
NO_IPV6 = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}
HARDENED = {"cap_drop": ["ALL"], "security_opt": ["no-new-privileges"], "pids_limit": 1024, "read_only": True}


def client():
    """A client of a daemon that answers, or a one-line error that says what to do instead."""
    from docker.errors import DockerException

    import docker

    try:
        found = docker.from_env(timeout=30)  # type: ignore[attr-defined]
        found.ping()
        return found
    except DockerException:
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise LabError(
            f"no Docker daemon answers at {where}: start one (`make host-deps` does, as root), or use --runtime local"
        ) from None


def require_image(docker_client, tag: str, build_hint: str) -> None:
    from docker.errors import ImageNotFound

    try:
        docker_client.images.get(tag)
    except ImageNotFound:
        raise LabError(f"image {tag} not found: build it with `{build_hint}`") from None


def node_build_hint(tag: str) -> str:
    target = tag.rsplit(":", 1)[-1] if ":" in tag else "cpu"
    return f"make images TARGETS={target}" if target in ("cpu", "cuda") else "make images"


def source_hash(lab_dir: Path = LAB_DIR) -> str:
    """A hash of lab/'s Python sources, as `make images` labels the image with."""
    digest = hashlib.sha256()
    for path in sorted(lab_dir.rglob("*.py")):
        digest.update(str(path.relative_to(lab_dir)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def stale_image_note(docker_client, tag: str) -> str | None:
    """A note when the image was built from other lab/ sources than these (its nodes run its copy)."""
    labels = docker_client.images.get(tag).labels or {}
    built_from = labels.get(SOURCE_LABEL)
    if built_from and built_from != source_hash():
        return f"note: image {tag} was built from other lab/ sources than this checkout; `make images` to rebuild"
    return None


def check_torch_build(docker_client, tag: str, backend: str, node_gpus: int) -> None:
    """Refuse GPUs asked of an image whose torch is a CPU build: every rank would fail at its
    first CUDA call. Images from elsewhere (no label) are taken at their word."""
    if backend != "nccl" and not node_gpus:
        return
    if (docker_client.images.get(tag).labels or {}).get(TORCH_LABEL) == "cpu":
        raise LabError(
            f"image {tag} has torch's CPU build; nccl and GPUs need the cuda image "
            "(make images TARGETS=cuda, then --image torchrun-lab:cuda)"
        )


def in_image(script: str) -> str:
    """The path a script has inside the node image: the lab's own workloads are in the image;
    any other script is mounted from the host at its own path (see mounts_for)."""
    path = Path(script).resolve()
    if path.is_relative_to(LAB_DIR):
        return f"{IMAGE_LAB_DIR}/{path.relative_to(LAB_DIR)}"
    return str(path)


def script_mount(script: str) -> dict:
    """A read-only mount of a user's script's folder, or nothing for the lab's own workloads."""
    path = Path(script).resolve()
    if path.is_relative_to(LAB_DIR):
        return {}
    return {str(path.parent): {"bind": str(path.parent), "mode": "ro"}}


def own_for_containers(*dirs: Path) -> str:
    """Make dirs writable by the containers' user. As root, nodes run as the image's user and
    the dirs are handed to it; otherwise nodes run as the caller's uid. Returns the user to run as."""
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return f"{os.getuid()}:{os.getgid()}"
    for d in dirs:
        # Never through a link: os.walk does not descend into one, and chown changes the link itself.
        for root, subdirs, files in os.walk(d):
            os.chown(root, IMAGE_UID, IMAGE_UID, follow_symlinks=False)
            for name in subdirs + files:
                os.chown(os.path.join(root, name), IMAGE_UID, IMAGE_UID, follow_symlinks=False)
    return f"{IMAGE_UID}:{IMAGE_UID}"
