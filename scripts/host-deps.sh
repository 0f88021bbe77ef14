#!/usr/bin/env bash
# Install the host tools the lab uses, if they are missing: iproute2 and iptables for netns
# hosts, prometheus (with promtool) to watch the ranks, etcd for the etcd-v2 rendezvous.
# Without root they cannot be installed here: the lab then runs its nodes on loopback and
# goes without Prometheus, and says so.
set -euo pipefail
missing=()
command -v ip >/dev/null || missing+=(iproute2)
command -v unshare >/dev/null || missing+=(util-linux)
command -v iptables >/dev/null || missing+=(iptables)
command -v prometheus >/dev/null || missing+=(prometheus)
command -v etcd >/dev/null || missing+=(etcd-server)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "note: ${missing[*]} missing and cannot be installed here (needs root and apt)"
    exit 0
fi
echo "installing ${missing[*]} (apt-get)"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
