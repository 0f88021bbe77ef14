#!/usr/bin/env bash
# Record what real runs saw, for the unit tests that judge it with no process at all:
#   drills: each runs one drill on netns hosts and keeps its seen.json and report.json under
#           tests/fixtures/drills/CASE/ (tests/unit/test_judges.py);
#   why-*:  each runs tests/scripts/fail_one_rank.py under `lab run` and keeps the evidence and
#           the card `lab run` saved under tests/fixtures/why/ (tests/unit/test_why_card.py).
# Re-record after a change to what a drill gathers or the card reads; about 11 min in all.
#   scripts/record-fixtures.sh [CASE...]      (default: every case below)
set -euo pipefail
cd "$(dirname "$0")/.."
LAB=${LAB:-.venv/bin/lab}
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
  [partition-node]="partition-node"
  [straggler]="straggler"
  [preempt]="preempt"
  [corrupt-checkpoint]="corrupt-checkpoint"
  [collective-mismatch]="collective-mismatch"
  [why-raise]="raise"
  [why-kill]="kill"
  [why-exit]="exit"
  [why-hang]="hang"
)

record_drill() {  # CASE DRILL-ARGS...
  local case=$1 out=tests/fixtures/drills/$1
  shift
  rm -rf "$out" "$WORK/report"
  "$LAB" exercise run "$@" --run-dir "$RUN_DIR" --report-dir "$WORK/report" | tail -3 || true
  mkdir -p "$out"
  cp "$WORK/report/seen.json" "$WORK/report/report.json" "$out/"
}

record_why() {  # HOW
  local out=tests/fixtures/why
  rm -rf "${out:?}/$1" "$out/$1.json" "$RUN_DIR"
  "$LAB" run --run-dir "$RUN_DIR" tests/scripts/fail_one_rank.py --rank 1 --how "$1" --timeout 5 | tail -3 || true
  mkdir -p "$out"
  cp "$RUN_DIR"/reports/why-*.json "$out/$1.json"
  cp -r "$(find "$RUN_DIR/reports" -maxdepth 1 -type d -name 'why-*')" "$out/$1"
  "$LAB" down --run-dir "$RUN_DIR" >/dev/null && rm -rf "$RUN_DIR"
}

for case in "${@:-${!CASES[@]}}"; do
  [[ -n "${CASES[$case]:-}" ]] || { echo "record-fixtures: no case $case; cases: ${!CASES[*]}" >&2; exit 2; }
  echo "== $case"
  # shellcheck disable=SC2086
  case $case in
    why-*) record_why "${CASES[$case]}" ;;
    *) record_drill "$case" ${CASES[$case]} ;;
  esac
done
