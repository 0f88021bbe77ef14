"""What the ranks run. Each workload is a plain script you can hand to torchrun."""

from pathlib import Path

WORKLOADS_DIR = Path(__file__).resolve().parent


def script_path(name: str) -> str:
    """Absolute path of a workload script, e.g. script_path("ddp_train")."""
    return str(WORKLOADS_DIR / f"{name}.py")
