#!/usr/bin/env bash
# Record what real runs saw, for the unit tests that judge it with no process at all:
#   drills: each runs one drill on netns hosts and keeps its seen.json and report.json under
#           tests/fixtures/drills/CASE/ (tests/unit/test_judges.py; script-*: a drill on one of
#           tests/user_scripts, tests/unit/test_script_judge.py; kind-*: tests/unit/test_script_kinds.py);
#   why-*:  each runs tests/scripts/fail_one_rank.py under `lab run` and keeps the evidence and
#           the card `lab run` saved under tests/fixtures/why/ (tests/unit/test_why_card.py);
#   diagnosis: cells of `lab bench diagnosis` (every fault class on both targets, the middle rank;
#           kill and exception also on the first and last) keep their evidence and truth under
#           tests/fixtures/diagnosis/ (tests/unit/test_diagnosis.py);
#   coordinators: cells of `lab bench coordinators` (each rendezvous store killed mid-run) keep their
#           evidence and verdict under tests/fixtures/coordinators/ (tests/unit/test_lost_store.py).
# Not recorded here: drills/script-corrupt-crowded and drills/script-corrupt-held-long were kept from
# CI runs that failed on them (timings a run does not give on demand); keep them as they are.
# Re-record after a change to what a drill gathers or the card reads; about 40 min in all.
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
  [kill-worker-in-process]="kill-worker --recovery in-process"
  [kill-worker-save-async]="kill-worker --parallel fsdp2 --save async"
  [rank-exception]="rank-exception"
  [kill-node]="kill-node"
  [kill-node-elastic]="kill-node --elastic"
  [kill-node-elastic-rejoin]="kill-node --elastic --rejoin"
  [kill-node-elastic-rejoin-4x1]="kill-node --elastic --rejoin --nodes 4 --nproc-per-node 1"
  [kill-node-in-process]="kill-node --recovery in-process"
  [kill-rendezvous-host]="kill-rendezvous-host"
  [kill-rendezvous-host-etcd]="kill-rendezvous-host --rdzv-backend etcd-v2"
  [hang-rank]="hang-rank --recovery restart"
  [hang-rank-in-process]="hang-rank"
  [hang-rank-watchdog]="hang-rank --watchdog 3"
  [hang-rank-in-python]="hang-rank --in-python"
  [hang-rank-in-python-restart]="hang-rank --in-python --recovery restart"
  [partition-node]="partition-node"
  [straggler]="straggler"
  [preempt]="preempt"
  [corrupt-checkpoint]="corrupt-checkpoint"
  [collective-mismatch]="collective-mismatch"
  [crash-loop]="crash-loop"
  [kill-in-save]="kill-in-save"
  [kill-in-save-fsdp2]="kill-in-save --parallel fsdp2 --target-rank 1"
  [script-cut-marker-first]="kill-in-save --script tests/user_scripts/latest_marker.py --at-step 12 -- --steps 40"
  [script-cut-marker-last]="kill-in-save --script tests/user_scripts/latest_marker.py --at-step 12 -- --steps 40 --marker-last"
  [script-cut-dcp-newest-folder]="kill-in-save --script tests/user_scripts/dcp_checkpoint.py --at-step 12 -- --steps 30 --newest-folder"
  [script-kill-worker]="kill-worker --script tests/user_scripts/snapshot_every_epoch.py -- --epochs 8"
  [script-never-loads]="kill-worker --script tests/user_scripts/never_loads.py --nodes 1 --nproc-per-node 3 --at-step 8 -- --steps 30"
  [script-silent]="kill-worker --script tests/user_scripts/silent.py --ckpt-dir state --at-time 4 -- --rounds 40"
  [script-unfired]="kill-worker --script tests/user_scripts/snapshot_every_epoch.py --at-step 50 -- --epochs 3"
  [script-rank-exception]="rank-exception --script tests/user_scripts/snapshot_every_epoch.py -- --epochs 8"
  [script-preempt]="preempt --script tests/user_scripts/snapshot_every_epoch.py -- --epochs 8"
  [script-straggler]="straggler --script tests/user_scripts/snapshot_every_epoch.py -- --epochs 30"
  [script-kill-node-elastic]="kill-node --elastic --script tests/user_scripts/snapshot_every_epoch.py --compare result.pt -- --epochs 12"
  [script-kill-node-elastic-samples]="kill-node --elastic --script tests/user_scripts/mid_epoch_resume.py --ckpt-dir . --at-step 22 -- --steps 40"
  [script-kill-node-elastic-rejoin]="kill-node --elastic --rejoin --script tests/user_scripts/snapshot_every_epoch.py -- --epochs 40"
  [why-raise]="raise"
  [why-kill]="kill"
  [why-exit]="exit"
  [why-hang]="hang"
  [diagnosis]="--positions middle --at-steps 6;--classes kill,exception --positions first,last --at-steps 14;--classes partition --hosts netns --positions middle --at-steps 6"
  [coordinators]="--coordinators c10d,lab-store,etcd --trials 1"
)
# The kinds of script people write (tests/user_scripts/snapshot_every_epoch.py's flags), each
# through every drill that takes --script: tests/unit/test_script_kinds.py.
SNAPSHOT=tests/user_scripts/snapshot_every_epoch.py
declare -A KINDS=(
  [rank0]="--epochs 8 --log-ranks 0"
  [sparse]="--epochs 10 --save-every 10"
  [config]="--epochs 6 --config lab_config.json"
  [crash]="--epochs 8 --crash-once-at 1"
  [argparse]="--epochs eight"
)
for kind in "${!KINDS[@]}"; do
  for drill in kill-worker kill-node hang-rank partition-node straggler preempt corrupt-checkpoint; do
    extra=""
    [[ $drill == corrupt-checkpoint ]] && extra="--ckpt-dir ."
    CASES[kind-$kind-$drill]="$drill --script $SNAPSHOT $extra -- ${KINDS[$kind]}"
  done
done
# Scripts in the styles people copy (tests/user_scripts/peers/), each on its own arguments through
# the drills that take --script: tests/unit/test_peer_scripts.py.
PEERS=tests/user_scripts/peers
# Each: the script | its checkpoints' folder | the drills' flags | the script's arguments.
declare -A PEER_RUNS=(
  [imagenet]="$PEERS/imagenet_style.py|.||--epochs 10 --resume checkpoint.pth.tar"
  [mingpt]="$PEERS/mingpt_style.py|.||max_epochs=8"
  [elastic]="$PEERS/elastic_imagenet_style.py|ckpt||--epochs 8 --checkpoint-file ckpt/checkpoint.pth.tar"
  [fsdp2]="$PEERS/fsdp2_style.py|checkpoints/dcp_api|--at-step 12|--steps 30"  # its first save: step 5
)
for peer in "${!PEER_RUNS[@]}"; do
  IFS='|' read -r script ckpt flags args <<< "${PEER_RUNS[$peer]}"
  for drill in kill-worker rank-exception preempt kill-in-save corrupt-checkpoint kill-node hang-rank; do
    extra="$flags"
    [[ $drill == corrupt-checkpoint ]] && extra="$extra --ckpt-dir $ckpt"
    CASES[peer-$peer-$drill]="$drill --script $script $extra -- $args"
  done
done

record_drill() {  # CASE DRILL-ARGS...
  local case=$1 out=tests/fixtures/drills/$1
  shift
  rm -rf "$out" "$WORK/report"
  # The lab's flags right after the drill's name: what follows a `--` is the script's.
  "$LAB" exercise run "$1" --run-dir "$RUN_DIR" --report-dir "$WORK/report" "${@:2}" | tail -3 || true
  local kept=$WORK/report
  [[ -f $kept/seen.json ]] || kept=$WORK/report/$1  # a drill on a script: one folder per run
  if [[ ! -f $kept/seen.json ]]; then
    echo "record-fixtures: $case gave no verdict (see above); not recorded" >&2
    MISSED+=("$case")
    return
  fi
  mkdir -p "$out"
  cp "$kept/seen.json" "$kept/report.json" "$out/"
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

record_diagnosis() {  # "BENCH-ARGS;BENCH-ARGS..."
  local out=tests/fixtures/diagnosis
  rm -rf "$out"
  IFS=';' read -ra runs <<< "$1"
  for args in "${runs[@]}"; do
    # shellcheck disable=SC2086
    "$LAB" bench diagnosis $args --keep "$out" --out "$WORK/bench" | grep '^\['
  done
}

record_coordinators() {  # BENCH-ARGS
  local out=tests/fixtures/coordinators
  rm -rf "$out"
  # shellcheck disable=SC2086
  "$LAB" bench coordinators $1 --keep "$out" --out "$WORK/bench" | grep '^\['
}

MISSED=()
for case in "${@:-${!CASES[@]}}"; do
  [[ -n "${CASES[$case]:-}" ]] || { echo "record-fixtures: no case $case; cases: ${!CASES[*]}" >&2; exit 2; }
  echo "== $case"
  # shellcheck disable=SC2086
  case $case in
    why-*) record_why "${CASES[$case]}" ;;
    diagnosis) record_diagnosis "${CASES[$case]}" ;;
    coordinators) record_coordinators "${CASES[$case]}" ;;
    *) record_drill "$case" ${CASES[$case]} ;;
  esac
done
if (( ${#MISSED[@]} )); then
  echo "record-fixtures: no verdict for: ${MISSED[*]}" >&2
  exit 1
fi
