#!/usr/bin/env bash
# Install the host tools the lab uses, if they are missing: iproute2 and iptables for netns
# hosts, prometheus (with promtool) to watch the ranks, etcd for the etcd-v2 rendezvous,
# kubectl to render (kustomize) and apply the Kubernetes manifests, docker.io and debootstrap
# for the docker runtime and its images (and a running dockerd, see start-dockerd.sh),
# chromium (headless) for the tests that load the lab's pages in a real browser, and Debian's
# docker-registry (the reference Distribution registry) for the tests that push images,
# python3.11-venv for the CI kit's fresh-virtualenv test.
# Without root they cannot be installed here: the lab then runs its nodes on loopback and
# goes without Prometheus, and says so.
set -euo pipefail
missing=()
command -v ip >/dev/null || missing+=(iproute2)
command -v unshare >/dev/null || missing+=(util-linux)
command -v iptables >/dev/null || missing+=(iptables)
command -v prometheus >/dev/null || missing+=(prometheus)
command -v etcd >/dev/null || missing+=(etcd-server)
docker info >/dev/null 2>&1 || command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
# A real browser for the tests of the live view (lab/health/consoles) and the drill matrix page.
command -v chromium >/dev/null || missing+=(chromium fonts-dejavu-core)
docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null || missing+=(docker-compose)
command -v docker-registry >/dev/null || missing+=(docker-registry)
# The CI kit's test installs the lab into a fresh virtualenv as an unprivileged user, with a
# python that user may run (tests/test_ci_fresh_venv.py).
/usr/bin/python3.11 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3.11-venv)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
        echo "note: ${missing[*]} missing and cannot be installed here (needs root and apt)"
        exit 0
    fi
    echo "installing ${missing[*]} (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# kubectl comes from Kubernetes' own apt repository, which not every machine has: try it,
# and say so when it is not there (the manifest tests then skip, saying why).
if ! command -v kubectl >/dev/null; then
    [ "$(id -u)" -eq 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubectl >/dev/null 2>&1 \
        || echo "note: kubectl is not installed (https://kubernetes.io/docs/tasks/tools/); the k8s tests will skip"
fi
"$(dirname "$0")/start-dockerd.sh"
