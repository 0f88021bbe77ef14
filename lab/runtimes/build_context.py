"""What of a user's folder goes into an image (`lab image build`, and `lab run --runtime k8s` with
a script on this machine): the folder copied into a staging dir, less what an image must not
carry or has no use for, and the build runs on that copy.

Left out, each said in the build's one line:
- version control (.git, .hg, .svn): the whole history, and often its remotes' credentials;
- virtualenvs and conda envs (a folder with pyvenv.cfg or conda-meta/): this machine's Python,
  not the image's, and gigabytes;
- caches (__pycache__, .mypy_cache, .pytest_cache, .ruff_cache, .ipynb_checkpoints);
- files that hold secrets by their name (.env, .env.*, .netrc, .pypirc, .npmrc, .git-credentials,
  private keys, and the .ssh, .aws, .kube, .docker folders): pushed to a registry, whoever may
  pull the image could read them;
- links that lead out of the folder (the image would hold a dangling link, or, resolved,
  something of this machine's the user never chose to bake), and what is not a file, a folder
  or a link (sockets, pipes).

A .dockerignore in the folder is copied too, so Docker still applies it to what is left.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from pathlib import Path

VCS = {".git", ".hg", ".svn"}
CACHES = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints"}
SECRET_FOLDERS = {".ssh", ".aws", ".kube", ".docker", ".gnupg"}
SECRET_FILES = (
    ".env", ".env.*", ".netrc", ".pypirc", ".npmrc", ".git-credentials", "id_rsa", "id_dsa", "id_ecdsa",
    "id_ed25519", "*.pem", "*.key", "*.p12", "*.pfx",
)  # fmt: skip
TEMPLATES = (".example", ".sample", ".template")  # .env.example: the names, no values


def why_left_out(path: Path, root: Path) -> str:
    """Why this entry of the folder stays out of the image ("" when it goes in)."""
    name = path.name
    if path.is_symlink():
        target = (path.parent / os.readlink(path)).resolve()
        return "" if target.is_relative_to(root) else f"a link out of the folder, to {target}"
    if path.is_dir():
        if name in VCS:
            return "version control"
        if (path / "pyvenv.cfg").is_file() or (path / "conda-meta").is_dir():
            return "a Python environment of this machine's"
        if name in CACHES:
            return "a cache"
        return "may hold secrets" if name in SECRET_FOLDERS else ""
    if not path.is_file():
        return "not a file, a folder or a link"
    if any(fnmatch.fnmatchcase(name, pattern) for pattern in SECRET_FILES) and not name.endswith(TEMPLATES):
        return "may hold secrets"
    return ""


def stage(directory: Path, into: Path) -> list[str]:
    """Copy what goes into the image from `directory` to `into` (made here); returns what was left
    out and why, one "path (why)" each, relative to the folder."""
    root = directory.resolve()
    left: list[str] = []
    for here, folders, names in os.walk(root):
        base = Path(here)
        target = into / base.relative_to(root)
        target.mkdir(exist_ok=True)
        for name in sorted(names) + [f for f in sorted(folders) if (base / f).is_symlink()]:
            path = base / name
            why = why_left_out(path, root)
            if why:
                left.append(f"{path.relative_to(root)} ({why})")
            elif path.is_symlink():
                os.symlink(os.readlink(path), target / name)
            else:
                shutil.copy2(path, target / name)
        kept = []
        for name in sorted(folders):
            path = base / name
            why = "" if path.is_symlink() else why_left_out(path, root)  # links: judged above
            if why:
                left.append(f"{path.relative_to(root)}/ ({why})")
            elif not path.is_symlink():
                kept.append(name)
        folders[:] = kept  # os.walk goes on into these alone
    return left


def left_out_line(left: list[str], shown: int = 6) -> str:
    """One line for the build's output ("" when nothing was left out)."""
    if not left:
        return ""
    more = f", and {len(left) - shown} more" if len(left) > shown else ""
    return f"left out of the image: {', '.join(left[:shown])}{more}"
