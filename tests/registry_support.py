"""A real image registry for tests: Debian's docker-registry (the reference Distribution
registry) on 127.0.0.1, its storage in a temp dir, stopped and gone afterwards."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.bench import free_port

needs_registry = pytest.mark.skipif(
    shutil.which("docker-registry") is None, reason="docker-registry not installed (make host-deps)"
)


@contextlib.contextmanager
def serving(where: Path) -> Iterator[str]:
    """HOST:PORT of a registry that answers its API, until the block ends."""
    port = free_port()
    config = where / "registry.yml"
    config.write_text(
        json.dumps(
            {
                "version": 0.1,
                "storage": {"filesystem": {"rootdirectory": str(where / "storage")}, "delete": {"enabled": True}},
                "http": {"addr": f"127.0.0.1:{port}"},
                "log": {"level": "warn"},
            }
        )
    )
    server = subprocess.Popen(
        ["docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(where / "storage", ignore_errors=True)  # a GB of layers: not kept with the test's dir
