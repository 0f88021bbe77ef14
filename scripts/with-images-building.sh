#!/usr/bin/env bash
# Run a command while the lab's images build beside it: `make test`'s system tier.
#   scripts/with-images-building.sh COMMAND [ARGS...]
# Most of that tier waits (paced steps, timeouts, restarts) with CPU to spare, and its first tests
# need no image; building in line, a Docker test's fixture held its worker for the whole build
# (about 2 minutes on a fresh machine) and a second worker's Docker test waited on the build's
# lock. Here the build (TARGETS, default "cpu ray") starts at once; the tests' own build call
# (tests/docker_support.py) waits on the same lock and finds every layer cached, or reports the
# failure itself. The build is waited for (or stopped, if the command was) before this exits,
# so nothing outlives it. Without a Docker daemon the command runs alone.
set -uo pipefail
cd "$(dirname "$0")/.."
log=test-artifacts/images-build.log
build=""
if docker info >/dev/null 2>&1; then
    mkdir -p test-artifacts
    TARGETS="${TARGETS:-cpu ray}" setsid scripts/build-images.sh >"$log" 2>&1 &  # its own group: stopped whole
    build=$!
    echo "building the images beside the tests (log: $log)"
fi
stop_build() { [[ -n $build ]] && kill -- "-$build" 2>/dev/null; }
trap 'stop_build; exit 130' INT TERM
"$@"
rc=$?
if [[ -n $build ]] && ! wait "$build"; then
    echo "the image build beside the tests failed (see $log); the Docker tests built again and said why" >&2
fi
exit $rc
