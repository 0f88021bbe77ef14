"""What of a user's folder goes into an image (lab.runtimes.build_context), on a real folder:
version control, Python environments, caches, files named like secrets and links out of the
folder stay out, each said with why; everything else goes in as it is, links inside included."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lab.errors import LabError
from lab.runtimes import build_context, user_image


def folder(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    for relative, text in {
        "train.py": "print('hi')\n",
        "pkg/model.py": "x = 1\n",
        "configs/.env.example": "TOKEN=\n",  # templates, named so they are kept
        "configs/.env.sample": "TOKEN=\n",
        ".dockerignore": "data/\n",
        ".git/config": "[remote]\n",
        ".venv/pyvenv.cfg": "home = /usr/bin\n",
        "envs/train/conda-meta/history": "\n",
        "pkg/__pycache__/model.cpython-311.pyc": "",
        ".env": "TOKEN=secret\n",
        "deploy/.env.production": "TOKEN=secret\n",
        "keys/id_ed25519": "PRIVATE\n",
        "keys/server.pem": "PRIVATE\n",
        ".aws/credentials": "[default]\n",
    }.items():
        (code / relative).parent.mkdir(parents=True, exist_ok=True)
        (code / relative).write_text(text)
    outside = tmp_path / "outside.txt"
    outside.write_text("this machine's\n")
    os.symlink(outside, code / "data_link")
    os.symlink("pkg/model.py", code / "model_link.py")
    os.symlink(tmp_path, code / "up")  # a folder out of it
    return code


def test_what_stays_out_is_said_with_why_and_the_rest_goes_in_as_it_is(tmp_path):
    code = folder(tmp_path)
    into = tmp_path / "staged"
    left = build_context.stage(code, into)
    kept = sorted(str(p.relative_to(into)) for p in into.rglob("*") if p.is_file() or p.is_symlink())
    assert kept == [
        ".dockerignore", "configs/.env.example", "configs/.env.sample", "model_link.py", "pkg/model.py", "train.py",
    ]  # fmt: skip
    assert os.readlink(into / "model_link.py") == "pkg/model.py"  # a link inside stays a link
    assert sorted(left) == sorted([
        ".env (may hold secrets)",
        "deploy/.env.production (may hold secrets)",
        "keys/id_ed25519 (may hold secrets)",
        "keys/server.pem (may hold secrets)",
        ".aws/ (may hold secrets)",
        ".git/ (version control)",
        ".venv/ (a Python environment of this machine's)",
        "envs/train/ (a Python environment of this machine's)",
        "pkg/__pycache__/ (a cache)",
        f"data_link (a link out of the folder, to {tmp_path / 'outside.txt'})",
        f"up (a link out of the folder, to {tmp_path})",
    ])  # fmt: skip


def test_the_line_names_a_few_and_counts_the_rest():
    assert build_context.left_out_line([]) == ""
    line = build_context.left_out_line([f"f{i} (a cache)" for i in range(9)], shown=2)
    assert line == "left out of the image: f0 (a cache), f1 (a cache), and 7 more"


def test_a_script_among_what_stays_out_is_one_line_before_any_build(tmp_path, monkeypatch):
    """The base image is looked for first (a daemon's question): here it is said to be there."""
    code = folder(tmp_path)
    (code / ".venv" / "train.py").write_text("print('not the image's')\n")
    monkeypatch.setattr(user_image.docker_engine, "client", lambda: None)
    monkeypatch.setattr(user_image.docker_engine, "require_image", lambda *args: None)
    with pytest.raises(LabError, match=r"^--script .*/\.venv/train\.py is among what stays out of the image: left"):
        user_image.build(code, code / ".venv" / "train.py", "127.0.0.1:5000/t:1", "cpu", log=lambda line: None)
