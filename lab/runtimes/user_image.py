"""`lab image build`: a user's training code baked into an image FROM the lab's node image.

    lab image build DIR --script DIR/train.py --tag REGISTRY/NAME:TAG [--base cpu|cuda] [--push]

DIR is copied to /opt/user/<DIR's name>/ on top of torchrun-lab:<base>, so the image keeps
the lab's node entry point, its non-root user and its torch build (and says which in its
label, which the docker runtime reads). A pod sees nothing of the machine that built it:
this is how a script reaches Kubernetes. With --push the image goes to its registry and is
printed by digest, the reference a Job should name (a rebuilt tag cannot change a running
job); the command that runs the script there is printed last.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from lab.errors import LabError
from lab.runtimes import build_context, docker_engine

IN_IMAGE = "/opt/user"
SCRIPT_LABEL = "torchrun-lab.script"  # where the baked script lies in the image
# What a registry may answer for an image's manifest (the Distribution API's Accept header).
MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
# Docker's reference grammar, less digests (a build names a tag): [host[:port]/]path[:tag].
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"(?:[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)*(?::[0-9]+)?)"
REFERENCE = re.compile(
    rf"^(?:(?P<host>{_HOST})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)(?::(?P<tag>\w[\w.-]{{0,127}}))?$"
)


def check_reference(ref: str) -> tuple[str | None, str]:
    """(registry host or None, repository) of an image reference, or a one-line error."""
    match = REFERENCE.match(ref)
    if not match or len(ref) > 255:
        raise LabError(f"--tag {ref!r} is not an image reference (REGISTRY[:PORT]/NAME[:TAG], lowercase name)")
    host, path = match["host"], match["path"]
    if host and not ("." in host or ":" in host or host == "localhost"):
        host, path = None, f"{host}/{path}"  # docker's rule: a first part without . or : is a path
    return host, f"{host}/{path}" if host else path


def script_in_image(directory: Path, script: Path) -> str:
    """Where `script` will lie in the image, or a one-line error when it is not in `directory`."""
    if not directory.is_dir():
        raise LabError(f"{directory} is not a directory")
    if not script.is_file():
        raise LabError(f"script not found: {script}")
    inside = script.resolve()
    if not inside.is_relative_to(directory.resolve()):
        raise LabError(f"--script {script} is not inside {directory}, the directory being baked into the image")
    return f"{IN_IMAGE}/{folder_in_image(directory)}/{inside.relative_to(directory.resolve())}"


def folder_in_image(directory: Path) -> str:
    """The folder's name in the image: its own, with anything but letters, digits, '.', '_' and
    '-' made '_'. It is written into the Dockerfile, so nothing else of the user's path may be
    (a name with a newline added instructions; one with a space broke the COPY)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", directory.resolve().name).lstrip(".")
    return name or "code"


def dockerfile(base_image: str, name: str) -> str:
    # COPY keeps root as the owner: the lab's user reads the code and cannot change it.
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]*", name) or not re.fullmatch(r"[\w.:/@-]+", base_image):
        raise LabError(f"not pasted into a Dockerfile: {base_image!r}, {name!r}")
    return f"FROM {base_image}\nCOPY . {IN_IMAGE}/{name}/\n"


def build(directory: Path, script: Path, tag: str, base: str, log=print) -> str:
    """Build the image from what of the folder may go in (lab.runtimes.build_context); return the
    script's path in it."""
    check_reference(tag)
    in_image = script_in_image(directory, script)
    base_image, name = f"torchrun-lab:{base}", folder_in_image(directory)
    docker_engine.require_image(docker_engine.client(), base_image, docker_engine.node_build_hint(base_image))
    log(f"building {tag} FROM {base_image} with {directory} at {IN_IMAGE}/{name}")
    staging = Path(tempfile.mkdtemp(prefix="tlab-build-"))
    try:
        left_out = build_context.left_out_line(build_context.stage(directory, staging / "context"))
        relative = script.resolve().relative_to(directory.resolve())
        if not (staging / "context" / relative).is_file():
            raise LabError(f"--script {script} is among what stays out of the image: {left_out}")
        if left_out:
            log(left_out)
        label = f"{SCRIPT_LABEL}={in_image}"
        built = _docker(
            "build", "-q", "-t", tag, "--label", label, "-f", "-", str(staging / "context"),
            stdin=dockerfile(base_image, name), timeout=1800,
        )  # fmt: skip
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if built.returncode != 0:
        raise LabError(f"docker build of {tag} failed: {_last_line(built)}")
    return in_image


def push(tag: str, log=print) -> str:
    """Push the image; return it by digest (REPOSITORY@sha256:...)."""
    host, repository = check_reference(tag)
    if host:
        _answers(host)
    log(f"pushing {tag}")
    pushed = _docker("push", "-q", tag, timeout=1800)
    if pushed.returncode != 0:
        raise LabError(f"pushing {tag} failed: {_last_line(pushed)}")
    digests = _docker("image", "inspect", "--format", "{{range .RepoDigests}}{{println .}}{{end}}", tag, timeout=60)
    found = [d for d in digests.stdout.split() if d.startswith(f"{repository}@sha256:")]
    if not found:
        raise LabError(f"pushed {tag}, but the daemon reports no digest for {repository}")
    return found[0]


def check_digest(ref: str, timeout_s: float = 10.0) -> None:
    """A reference by digest whose registry says it holds no such manifest (deleted, or never
    pushed) is a one-line error: the pods would only wait in ImagePullBackOff. A registry this
    machine cannot ask (no answer, asks for credentials, HTTPS it cannot verify) is left to the
    cluster, which may reach it with its pull secret."""
    repository, _, digest = ref.partition("@")
    host, repository = check_reference(repository) if REFERENCE.match(repository) else (None, "")
    if not host or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        return
    local = host.startswith(("localhost", "127."))  # registries docker itself talks plain HTTP to
    path = repository.removeprefix(f"{host}/")
    ask = urllib.request.Request(
        f"{'http' if local else 'https'}://{host}/v2/{path}/manifests/{digest}",
        method="HEAD",
        headers={"Accept": MANIFEST_TYPES},
    )
    try:
        urllib.request.urlopen(ask, timeout=timeout_s).close()
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise LabError(
                f"image {ref}: registry {host} holds no manifest with that digest (deleted, or never pushed)"
            ) from None
    except (OSError, ValueError):
        pass


def _answers(host: str, timeout_s: float = 5.0) -> None:
    """A registry that does not accept a connection is a one-line error in seconds, not a hang."""
    name, _, port = host.partition(":")
    try:
        with socket.create_connection((name, int(port or 443)), timeout=timeout_s):
            pass
    except OSError as e:
        reason = e.strerror or str(e)
        raise LabError(f"registry {host} does not answer ({reason}): is it running, and is this its address?") from None


def _docker(*args: str, stdin: str | None = None, timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["docker", *args], input=stdin, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise LabError("docker is not installed (make host-deps installs it)") from None


def _last_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else f"exit status {done.returncode}"
