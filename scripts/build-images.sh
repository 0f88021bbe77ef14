#!/usr/bin/env bash
# Build the lab's images: the node image's targets (TARGETS, default "cpu cuda") as
# torchrun-lab:<target>, and torchrun-lab-prometheus:2.42 (docker/prometheus.Dockerfile).
#   BASE_IMAGE=...  build every target on this base instead of the Dockerfile's pinned ones
#   OFFLINE=1       install wheels from docker/wheels/ only (`make wheels` fills it)
#   REGISTRY=HOST:PORT  also tag each image HOST:PORT/NAME:TAG; with PUSH=1 push them and print
#                   each as pushed, by digest (REF@sha256:...): what manifests should name, so a
#                   rebuilt tag cannot change a running job
# When BASE_IMAGE is unset and the cpu base cannot be pulled (no registry), the base comes
# from scripts/docker-base-image.sh (debootstrap) and the build goes offline: the cuda target then
# installs docker/wheels-cuda/ (`make wheels-cuda`, about 3 GB) through a build context of its own
# (hard links). A target that does not build is reported and skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
# One build at a time per checkout (the test suite's workers and `make lab-up` may ask at once):
# a second waits, then finds every layer cached. The lock is the Dockerfile itself, opened to read.
exec 9<docker/Dockerfile
flock 9
logs="$(mktemp -d)"
cuda_context=build/cuda-context
trap 'rm -rf "$logs" "$cuda_context"' EXIT
targets="${TARGETS:-cpu cuda}"
python="${PYTHON:-.venv/bin/python}"
cpu_base="$(sed -n 's/^ARG PYTHON_BASE_IMAGE=//p' docker/Dockerfile)"
base="${BASE_IMAGE:-}" offline="${OFFLINE:-0}"
built=() skipped=()
docker info >/dev/null 2>&1 || { echo "error: no Docker daemon answers (make host-deps starts one as root)" >&2; exit 1; }
if [ -z "$base" ] && ! docker image inspect "$cpu_base" >/dev/null 2>&1 && ! docker pull -q "$cpu_base" >/dev/null 2>&1; then
    echo "cannot pull $cpu_base: building a base with debootstrap and installing wheels offline"
    scripts/docker-base-image.sh
    base=torchrun-lab-base:bookworm offline=1
fi
if [ "$offline" = 1 ] && { ! ls docker/wheels/torch-*.whl >/dev/null 2>&1 \
        || { [[ " $targets " == *" ray "* ]] && ! ls docker/wheels/ray-*.whl >/dev/null 2>&1; }; }; then
    make --no-print-directory wheels
fi
if [ "$offline" = 1 ] && [[ " $targets " == *" cuda "* ]] && ! ls docker/wheels-cuda/torch-*.whl >/dev/null 2>&1; then
    make --no-print-directory wheels-cuda
fi
# The context a target builds from: the checkout, whose .dockerignore leaves docker/wheels-cuda/'s
# 3 GB out; for an offline cuda build, the same files plus those wheels (hard links: nothing is
# copied). The stages before cuda's see the same files as in a cpu build, so they come from cache.
context_for() {
    if [ "$1" != cuda ] || [ "$offline" != 1 ]; then echo .; return; fi
    rm -rf "$cuda_context" && mkdir -p "$cuda_context/docker"
    cp -al lab "$cuda_context/"
    cp -al docker/requirements-node.txt docker/requirements-ray.txt docker/install-deps.sh \
        docker/wheels docker/wheels-cuda "$cuda_context/docker/"
    { cat .dockerignore; echo '!docker/wheels-cuda/'; } >"$cuda_context/.dockerignore"
    echo "$cuda_context"
}
source_hash="$("$python" -c 'from lab.runtimes.docker_engine import source_hash; print(source_hash())')"
# The image a rebuild replaces loses its tag and would stay on disk, untagged, for good (62 GB
# of them were found here after a few days of rebuilds): removed once replaced, if this script
# made it (it carries the source label) and no container or image still uses it.
replaced_by_us() {  # nothing, and success, when there is no such image yet (a fresh machine)
    { docker image inspect -f '{{.Id}} {{index .Config.Labels "torchrun-lab.source"}}' "$1" 2>/dev/null || true; } \
        | awk 'NF == 2 && $2 != "<no" {print $1}'
}
# Everything an image is made from: the target and its base, the Dockerfile and what it copies
# (lab/, the requirements, the install script, which wheels). An image labelled with the same
# hash is up to date and is not built again: sending the 300 MB context only to find every layer
# cached took about 30 s a call, and the suite's Docker tests and `make lab-up` call it often.
inputs_of() {  # $1: the target, or "prometheus"
    {
        echo "$1 ${base:-$cpu_base} offline=$offline"
        docker image inspect -f '{{.Id}}' "${base:-$cpu_base}" 2>/dev/null || true
        if [ "$1" = prometheus ]; then
            find docker/prometheus docker/prometheus.Dockerfile -type f -print0 | sort -z | xargs -0 sha256sum
        else
            sha256sum docker/Dockerfile docker/requirements-node.txt docker/requirements-ray.txt docker/install-deps.sh
            ls docker/wheels
            if [ "$1" = cuda ]; then ls docker/wheels-cuda 2>/dev/null || true; fi
            find lab -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum
        fi
    } | sha256sum | cut -c1-16
}
up_to_date() {  # $1: the image, $2: its inputs' hash
    [ "$(docker image inspect -f '{{index .Config.Labels "torchrun-lab.inputs"}}' "$1" 2>/dev/null)" = "$2" ]
}
for target in $targets; do
    inputs="$(inputs_of "$target")"
    if up_to_date "torchrun-lab:$target" "$inputs"; then
        echo "torchrun-lab:$target is up to date (built from these sources, wheels and base)"
        built+=("torchrun-lab:$target")
        continue
    fi
    echo "building torchrun-lab:$target${base:+ on $base}${offline/#1/ (offline)}"
    old="$(replaced_by_us "torchrun-lab:$target")"
    if docker build -q -f docker/Dockerfile --target "$target" -t "torchrun-lab:$target" \
        ${base:+--build-arg BASE_IMAGE="$base"} --build-arg OFFLINE="$offline" \
        --label "torchrun-lab.source=$source_hash" --label "torchrun-lab.inputs=$inputs" \
        "$(context_for "$target")" >"$logs/$target.log" 2>&1; then
        built+=("torchrun-lab:$target")
        if [ -n "$old" ] && [ "$old" != "$(docker image inspect -f '{{.Id}}' "torchrun-lab:$target")" ]; then
            docker rmi "$old" >/dev/null 2>&1 || true
        fi
    else
        skipped+=("$target ($(grep -v DEPRECATED "$logs/$target.log" | grep -iE 'error|denied|not found' | tail -1 | cut -c1-120))")
    fi
done
inputs="$(inputs_of prometheus)"
if up_to_date torchrun-lab-prometheus:2.42 "$inputs"; then
    echo "torchrun-lab-prometheus:2.42 is up to date"
else
    echo "building torchrun-lab-prometheus:2.42"
    docker build -q -f docker/prometheus.Dockerfile ${base:+--build-arg BASE_IMAGE="$base"} \
        --label "torchrun-lab.inputs=$inputs" -t torchrun-lab-prometheus:2.42 docker/prometheus \
        >"$logs/prometheus.log" 2>&1 \
        || { tail -3 "$logs/prometheus.log" >&2; echo "error: the Prometheus image did not build" >&2; exit 1; }
fi
built+=(torchrun-lab-prometheus:2.42)
echo "built: ${built[*]}"
if [ -n "${REGISTRY:-}" ]; then
    for image in "${built[@]}"; do
        docker tag "$image" "$REGISTRY/$image"
        if [ "${PUSH:-0}" = 1 ]; then
            docker push -q "$REGISTRY/$image" >"$logs/push.log" 2>&1 \
                || { tail -2 "$logs/push.log" >&2; echo "error: pushing $REGISTRY/$image failed" >&2; exit 1; }
            digest="$(docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$REGISTRY/$image" \
                | grep "^$REGISTRY/${image%%:*}@" | head -1)"
            echo "pushed $REGISTRY/$image as $digest"
        else
            echo "tagged $REGISTRY/$image (PUSH=1 pushes it)"
        fi
    done
fi
[ ${#skipped[@]} -eq 0 ] || echo "skipped: ${skipped[*]}"
[ -z "${targets// /}" ] || [[ " ${built[*]} " == *" torchrun-lab:$(echo $targets | cut -d' ' -f1) "* ]]  # the first target must build
