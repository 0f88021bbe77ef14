"""`lab image build`: bake your training code into an image FROM the lab's, for Kubernetes."""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.errors import LabError
from lab.exercises.script import spec
from lab.runtimes import user_image


def register(sub) -> None:
    parser = sub.add_parser("image", help="build an image of your own code FROM the lab's node image")
    verbs = parser.add_subparsers(dest="verb", metavar="build", required=True, parser_class=type(parser))
    build = verbs.add_parser(
        "build",
        help="copy DIR into an image FROM torchrun-lab:BASE (and push it), for --runtime k8s --image",
        description="Copy DIR into an image FROM torchrun-lab:BASE, so pods can run your script; "
        "--push sends it to its registry and prints it by digest, the reference a Job should name.",
    )
    build.add_argument("directory", metavar="DIR", type=Path, help="the folder with your code (copied whole)")
    spec.SCRIPT.but(help="the training script, a file inside DIR (required)").add_to(build)
    build.add_argument("--tag", required=True, help="the image reference to build: REGISTRY[:PORT]/NAME[:TAG]")
    build.add_argument("--base", choices=("cpu", "cuda"), default="cpu", help="torchrun-lab:cpu (gloo) or :cuda (nccl)")
    build.add_argument("--push", action="store_true", help="push it and print it by digest")
    build.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if not args.script:
        raise LabError("--script PATH is required: the training script, a file inside DIR")
    script = user_image.build(args.directory, Path(args.script), args.tag, args.base)
    ref = user_image.push(args.tag) if args.push else args.tag
    print(f"built {args.tag}" + (f", pushed as {ref}" if args.push else ""))
    print(f"run it: lab run --runtime k8s --image {ref} {script}")
    return 0
