"""What can be checked of the images and the Docker runtime without building or a daemon."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch
from conftest import REPO

from lab.workloads import distributed

DOCKERFILE = REPO / "docker" / "Dockerfile"


def stages(text: str) -> dict[str, list[str]]:
    """{stage name: its instructions}, continuation lines joined, comments dropped."""
    found, current = {}, None
    for line in text.replace("\\\n", " ").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("FROM "):
            current = line.split(" AS ")[-1]
            found[current] = []
        if current:
            found[current].append(line)
    return found


def test_cuda_target_differs_from_cpu_only_in_its_torch_build():
    """One base for both: torch's CUDA wheel brings the CUDA libraries, the host the driver."""
    found = stages(DOCKERFILE.read_text())
    assert {"cpu", "cuda", "cpu-deps", "cuda-deps"} <= set(found)
    for cpu, cuda in (("cpu-deps", "cuda-deps"), ("cpu", "cuda")):
        assert len(found[cpu]) == len(found[cuda])
        differ = [
            (a, b)
            for a, b in zip(found[cpu], found[cuda], strict=True)
            if a != b.replace("cuda-deps", "cpu-deps").replace(" AS cuda", " AS cpu")
        ]
        kinds = {a.split("=")[0] for a, _ in differ}
        allowed = {"ARG TORCH_SPEC", "ARG TORCH_INDEX_URL", "COPY docker/wheels/ /build/wheels/"}
        allowed.add("LABEL torchrun-lab.torch")
        assert kinds <= allowed, differ
    args = {
        name: dict(re.findall(r"ARG (TORCH_\w+)=(\S+)", " ".join(found[name]))) for name in ("cpu-deps", "cuda-deps")
    }
    assert args["cpu-deps"]["TORCH_INDEX_URL"].endswith("/whl/cpu"), args
    # PyPI's Linux torch wheel is the CUDA build, pinned exactly like the CPU one
    assert args["cuda-deps"]["TORCH_INDEX_URL"] == "https://pypi.org/simple", args
    assert all(re.fullmatch(r"torch==[\d.]+", a["TORCH_SPEC"]) for a in args.values()), args


def test_the_image_pins_its_bases_and_runs_as_a_non_root_user():
    text = DOCKERFILE.read_text()
    for arg in ("PYTHON_BASE_IMAGE",):
        value = re.search(rf"^ARG {arg}=(\S+)$", text, re.M).group(1)
        assert ":" in value and not value.endswith(":latest"), value
    for name in ("cpu", "cuda"):
        users = [line for line in stages(text)[name] if line.startswith("USER ")]
        assert users and users[-1].split()[1].split(":")[0] not in ("0", "root"), users
    requirements = (REPO / "docker" / "requirements-node.txt").read_text().split("\n")
    assert all("==" in line for line in requirements if line and not line.startswith("#"))


def test_no_docker_daemon_is_one_line_suggesting_the_local_runtime(tmp_path):
    env = {
        "PATH": "/usr/bin:/bin",
        "DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock",
        "LAB_RUN_DIR": str(tmp_path / "run"),
    }
    out = subprocess.run(
        [sys.executable, "-m", "lab", "up", "--runtime", "docker"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "no Docker daemon answers" in out.stderr and "--runtime local" in out.stderr


def test_nccl_path_sets_the_device_before_any_tensor_and_passes_device_ids(monkeypatch):
    """No GPU here: torch.cuda.set_device and the process-group calls are test doubles that
    record their order, and a TorchFunctionMode records every tensor made. The code under
    test (lab.workloads.distributed, used by every workload) runs for real around them."""
    calls = []

    class RecordTensors(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            if isinstance(result, torch.Tensor):
                calls.append(f"tensor from torch.{getattr(func, '__name__', func)}")
            return result

    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: calls.append(f"set_device({index})"))
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda **kw: calls.append(f"init({kw['backend']})"))
    monkeypatch.setattr(distributed.dist, "get_rank", lambda: 3)
    monkeypatch.setattr(distributed.dist, "get_world_size", lambda: 4)
    monkeypatch.setattr(distributed.dist, "barrier", lambda: None)
    monkeypatch.setattr(distributed.dist, "destroy_process_group", lambda: calls.append("destroy"))
    wrapped = {}
    monkeypatch.setattr(
        torch.nn.parallel,
        "DistributedDataParallel",
        lambda model, device_ids=None, **kw: wrapped.update(device_ids=device_ids) or model,
    )
    with RecordTensors():
        with distributed.process_group("nccl") as ctx:
            calls.append("user code")
            distributed.ddp(torch.nn.Linear(2, 2), ctx)
    assert calls[:3] == ["set_device(1)", "init(nccl)", "user code"], calls
    assert any(c.startswith("tensor from") for c in calls), "the recorder saw no tensor made: it is broken"
    assert ctx.device == torch.device("cuda", 1)
    assert wrapped["device_ids"] == [1]
    assert calls[-1] == "destroy"


@pytest.mark.parametrize("path", ["docker/compose.yaml"])
def test_compose_publishes_ports_on_loopback_only(path):
    import yaml

    compose = yaml.safe_load((REPO / path).read_text())
    services = compose["services"]
    assert {"node0", "node1", "prometheus", "grafana"} <= set(services)
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond this machine"
