#!/usr/bin/env bash
# Record what real drills saw, for the judges' unit tests (tests/unit/test_judges.py):
# each case runs one drill on netns hosts and keeps its seen.json and report.json under
# tests/fixtures/drills/CASE/. Re-record after a change to what a drill gathers; about 7 min.
#   scripts/record-fixtures.sh [CASE...]      (default: every case below)
set -euo pipefail
cd "$(dirname "$0")/.."
LAB=${LAB:-.venv/bin/lab}
OUT=tests/fixtures/drills
WORK=$(mktemp -d /tmp/tlab-record.XXXXXX)
RUN_DIR=$WORK/run  # the lab makes its own run dir
trap '$LAB down --run-dir "$RUN_DIR" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT

declare -A CASES=(
  [kill-worker]="kill-worker"
  [kill-worker-torch-defaults]="kill-worker --torch-defaults"
  [kill-node]="kill-node"
  [kill-node-elastic]="kill-node --elastic"
  [kill-rendezvous-host]="kill-rendezvous-host"
  [kill-rendezvous-host-etcd]="kill-rendezvous-host --rdzv-backend etcd-v2"
  [hang-rank]="hang-rank"
  [hang-rank-watchdog]="hang-rank --watchdog 3"
)
for case in "${@:-${!CASES[@]}}"; do
  [[ -n "${CASES[$case]:-}" ]] || { echo "record-fixtures: no case $case; cases: ${!CASES[*]}" >&2; exit 2; }
  echo "== $case: lab exercise run ${CASES[$case]}"
  rm -rf "${OUT:?}/$case" "$WORK/report"
  # shellcheck disable=SC2086
  $LAB exercise run ${CASES[$case]} --run-dir "$RUN_DIR" --report-dir "$WORK/report" | tail -3 || true
  mkdir -p "$OUT/$case"
  cp "$WORK/report/seen.json" "$WORK/report/report.json" "$OUT/$case/"
done
