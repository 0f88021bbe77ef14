#!/bin/sh
# Build the image's virtual environment in /opt/venv (run by docker/Dockerfile).
#   install-deps.sh TORCH_SPEC TORCH_INDEX_URL OFFLINE [MORE_REQUIREMENTS]
# OFFLINE=1 installs every wheel from /build/wheels with --no-index (`make wheels` fills
# docker/wheels/), as an air-gapped cluster must; otherwise torch comes from TORCH_INDEX_URL.
set -eu
torch_spec="$1" torch_index="$2" offline="$3"
more="${4:+-r $4}"
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    # Base images without python3-venv (the CUDA runtime images): install it from the distribution.
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 python3-venv >/dev/null
    rm -rf /var/lib/apt/lists/*
fi
python3 -m venv /opt/venv
if [ "$offline" = 1 ]; then
    ls /build/wheels/*.whl >/dev/null 2>&1 || { echo "OFFLINE=1 but docker/wheels/ has no wheels: run make wheels" >&2; exit 1; }
    /opt/venv/bin/pip install --no-cache-dir --no-index --find-links /build/wheels "$torch_spec" -r /build/requirements-node.txt $more
else
    /opt/venv/bin/pip install --no-cache-dir --index-url "$torch_index" --extra-index-url https://pypi.org/simple \
        "$torch_spec" -r /build/requirements-node.txt $more
fi
# pip is not needed at run time. The bytecode pip compiled stays: without it every node
# start would compile torch's sources again (the non-root user cannot cache them).
/opt/venv/bin/pip uninstall -y -q pip
