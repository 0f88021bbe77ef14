#!/usr/bin/env bash
# Start a Docker daemon when none answers and this machine can run one (root, dockerd
# installed, no service manager doing it). Used by host-deps; its log: /var/log/tlab-dockerd.log.
set -euo pipefail
docker info >/dev/null 2>&1 && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v dockerd >/dev/null; then
    echo "note: no Docker daemon answers; the docker runtime and its tests need one"
    exit 0
fi
echo "starting dockerd (log /var/log/tlab-dockerd.log)"
nohup dockerd >/var/log/tlab-dockerd.log 2>&1 &
for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && exit 0
    sleep 0.5
done
echo "error: dockerd did not answer within 30 s: $(tail -1 /var/log/tlab-dockerd.log)" >&2
exit 1
