"""A script on this machine, for pods, which see nothing of it: its folder baked into an image
FROM the lab's (lab.runtimes.user_image; what of the folder goes in: lab.runtimes.build_context),
pushed to a registry, and named by digest in the Job, with the script's path in the image.

`lab run --runtime k8s --registry HOST[:PORT] ./train.py`, and a drill on such a script, do it
once a cluster answers, before the Job is applied (the registry of --image when no --registry is
given); `--dry-run` says what it would build and push, and renders the Job with the tag it would
push, building nothing. No registry: one line naming --registry and `lab image build`.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from lab.errors import LabError
from lab.options import Option
from lab.runtimes import user_image

REGISTRY = Option(
    "--registry",
    "with a script on this machine: where the image the lab bakes of its folder is pushed "
    "(default: --image's registry)",
    metavar="HOST[:PORT][/PATH]",
)

NOTHING_TO_BAKE = (
    "--registry is where a script on this machine is pushed once baked; {script} is not one (a script in "
    "the image, or the lab's own workload): drop --registry"
)


@dataclass(frozen=True)
class Bake:
    """What would be built and pushed: the script's folder, FROM torchrun-lab:<base>, as tag."""

    directory: Path
    script: Path
    tag: str
    base: str
    in_image: str  # the script's path in the image

    def line(self) -> str:
        return (
            f"would build {self.directory} FROM torchrun-lab:{self.base} as {self.tag} and push it; "
            "the Job names it by digest"
        )

    def run(self, log=print) -> str:
        """Build and push; the image by digest (REPOSITORY@sha256:...)."""
        user_image.build(self.directory, self.script, self.tag, self.base, log)
        return user_image.push(self.tag, log)


def is_this_machines(script: str) -> bool:
    """A file here, outside the folder images hold users' code in: the user's own, to bake."""
    return Path(script).is_file() and not str(Path(script).resolve()).startswith(user_image.IN_IMAGE + "/")


def plan(script: str, registry: str | None, image: str | None, base: str) -> Bake:
    """The bake for a script on this machine, or one line saying what is missing."""
    registry = registry or (user_image.check_reference(image.partition("@")[0])[0] if image else None)
    if not registry:
        raise LabError(
            f"--runtime k8s: a pod cannot see {script} on this machine: give --registry HOST[:PORT] and the lab "
            "bakes its folder into an image and pushes it there (or bake it yourself: lab image build DIR --script "
            "DIR/train.py --tag REF --push, then --image REF and the script's path inside the image)"
        )
    directory = Path(script).resolve().parent
    name = re.sub(r"[^a-z0-9]+", "-", user_image.folder_in_image(directory).lower()).strip("-") or "code"
    tag = f"{registry.rstrip('/')}/torchrun-lab-user-{name}:{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        user_image.check_reference(tag)
    except LabError:
        raise LabError(f"--registry {registry!r} is not a registry (HOST[:PORT], and a path if it takes one)") from None
    in_image = user_image.script_in_image(directory, Path(script))
    return Bake(directory, Path(script), tag, base, in_image)


def not_in_image(script: str, image: str | None) -> str:
    """Why pods cannot run this script of the user's, in one line ("" when they can): a pod sees
    nothing of this machine, only the image --image names, at the script's path there."""
    if not image and not os.path.isfile(script):
        return (
            f"--runtime k8s: {script} is no file on this machine, and the lab's image has no such script: give "
            "its path here (lab run bakes it, with --registry), or --image REF and its path inside that image"
        )
    if not image:
        return (
            f"--runtime k8s: a pod cannot see {script} on this machine: bake it into an image (lab image build "
            "DIR --script DIR/train.py --tag REF --push), then give --image REF and the script's absolute path "
            "inside the image"
        )
    if not os.path.isabs(script):
        return f"--runtime k8s --image: give the script's absolute path inside the image, not {script!r}"
    if os.path.isfile(script) and not script.startswith(user_image.IN_IMAGE + "/"):
        return (  # a file here is this machine's: the Job would name a path no pod has
            f"--runtime k8s --image: {script} is a file on this machine, and a pod sees only the image: give "
            f"its path inside {image} (lab image build puts DIR at {user_image.IN_IMAGE}/<DIR's name>/ and prints "
            f"it), or bake it in first (lab image build DIR --script {script} --tag REF --push)"
        )
    return ""
