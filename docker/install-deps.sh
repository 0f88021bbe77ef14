#!/bin/sh
# Build the image's virtual environment in /opt/venv (run by docker/Dockerfile).
#   install-deps.sh TORCH_SPEC TORCH_INDEX_URL OFFLINE
# OFFLINE=1 installs every wheel from /build/wheels with --no-index (`make wheels` fills
# docker/wheels/), as an air-gapped cluster must; otherwise torch comes from TORCH_INDEX_URL.
#   install-deps.sh --add REQUIREMENTS OFFLINE   add to a venv built before (the ray target)
set -eu
if [ "$1" = --add ]; then
    /opt/venv/bin/python -m ensurepip >/dev/null
    if [ "$3" = 1 ]; then
        /opt/venv/bin/python -m pip install --no-cache-dir --no-index --find-links /build/wheels -r "$2"
    else
        /opt/venv/bin/python -m pip install --no-cache-dir -r "$2"
    fi
    /opt/venv/bin/python -m pip uninstall -y -q pip
    exit 0
fi
torch_spec="$1" torch_index="$2" offline="$3"
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    # Base images without python3-venv (the CUDA runtime images): install it from the distribution.
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 python3-venv >/dev/null
    rm -rf /var/lib/apt/lists/*
fi
python3 -m venv /opt/venv
if [ "$offline" = 1 ]; then
    ls /build/wheels/*.whl >/dev/null 2>&1 || { echo "OFFLINE=1 but docker/wheels/ has no wheels: run make wheels" >&2; exit 1; }
    /opt/venv/bin/pip install --no-cache-dir --no-index --find-links /build/wheels "$torch_spec" -r /build/requirements-node.txt
else
    /opt/venv/bin/pip install --no-cache-dir --index-url "$torch_index" --extra-index-url https://pypi.org/simple \
        "$torch_spec" -r /build/requirements-node.txt
fi
# pip is not needed at run time. The bytecode pip compiled stays: without it every node
# start would compile torch's sources again (the non-root user cannot cache them).
/opt/venv/bin/pip uninstall -y -q pip
