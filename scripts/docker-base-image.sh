#!/usr/bin/env bash
# Build a Debian base image with no registry: a `debootstrap --variant=minbase` rootfs with
# python3 and python3-venv, imported with `docker import`. For machines that cannot pull
# python:3.11-slim (air-gapped, or CI here). Then: make images BASE_IMAGE=<the tag below>.
#   scripts/docker-base-image.sh [TAG]     (default torchrun-lab-base:bookworm; needs root)
set -euo pipefail
tag="${1:-torchrun-lab-base:bookworm}"
if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "base image $tag exists"
    exit 0
fi
command -v debootstrap >/dev/null || { echo "error: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "error: debootstrap needs root" >&2; exit 1; }
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
rootfs="$(mktemp -d /tmp/tlab-rootfs.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT
echo "debootstrap bookworm (minbase + python3, python3-venv) from $mirror into $rootfs (about a minute)"
debootstrap --variant=minbase --include=python3,python3-venv bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
    || { tail -5 "$rootfs.log" >&2; rm -f "$rootfs.log"; echo "error: debootstrap failed" >&2; exit 1; }
rm -f "$rootfs.log"
# What an image does not need: apt lists, docs, man pages, locales.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/usr/share/{doc,man,info,locale}/*
tar -C "$rootfs" -c . | docker import --change 'CMD ["/bin/bash"]' - "$tag" >/dev/null
echo "imported $tag ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
