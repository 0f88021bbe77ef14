"""Talking to the Docker daemon in tests: the CLI, the lab's labels, the images as CI builds them."""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import REPO

from lab.runtimes.docker_engine import LABEL, NODE_IMAGE


def docker(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def labelled(run_dir, kind: str = "container") -> list[str]:
    """Names of the containers (or networks) labelled with this run dir, stopped ones too."""
    extra = ["-a"] if kind == "container" else []
    out = docker(
        kind,
        "ls",
        *extra,
        "--filter",
        f"label={LABEL}={run_dir.resolve()}",
        "--format",
        "{{.Name}}" if kind == "network" else "{{.Names}}",
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def build_images(targets: str, **env: str) -> str:
    """`make images` as CI runs it (offline, on a debootstrap base, where no registry answers),
    with more of its variables (REGISTRY, PUSH) when given; what it printed."""
    built = subprocess.run(
        ["scripts/build-images.sh"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "TARGETS": targets, **env},
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    return built.stdout


def images_or_fail() -> str:
    if docker("info").returncode != 0:
        pytest.fail(
            "no Docker daemon answers: `make host-deps` starts one (as root); skip these tests with -m 'not docker'"
        )
    build_images("cpu")
    return NODE_IMAGE


def compose_command() -> list[str]:
    if docker("compose", "version").returncode == 0:
        return ["docker", "compose"]
    return ["docker-compose"]  # Debian's 1.29, which host-deps installs
