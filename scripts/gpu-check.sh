#!/usr/bin/env bash
# The lab's CUDA/nccl path, checked on a machine with NVIDIA GPUs, in one go. Each step has a
# time limit; every log and result goes under one folder ($OUT when set, else ./gpu-check-out),
# and a summary table ends the run. Needs no network when torch's CUDA build is already
# installed (it is used through a venv with --system-site-packages); otherwise it installs
# torch from the package index into that venv.
#
#   scripts/gpu-check.sh            # run it
#   scripts/gpu-check.sh --dry-run  # print each step, run nothing (works on any machine)
#
# Steps: the job with nccl on 1 node x all GPUs; 2 netns nodes with disjoint GPUs (2+ GPUs);
# the set-device-first and buffers (SyncBatchNorm) lessons; the exporter's GPU metrics; the nccl collectives bench at a
# few sizes with the device-copy ceiling; the resumable trainer under nccl, sharded with FSDP2 too, and
# in-process recovery's keepers on nccl.
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=0; [ "${1:-}" = "--dry-run" ] && DRY=1
OUT_DIR="${OUT:-$PWD/gpu-check-out}"
VENV="${GPU_CHECK_VENV:-/tmp/torchrun-lab-gpu-venv}"
STEP_LIMIT="${GPU_CHECK_STEP_S:-240}"
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1 LAB_RUN_DIR="$OUT_DIR/run"
results=()

gpu_count() { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || echo 0; }

step() {  # step NAME CONDITION-OR-"" COMMAND...: run COMMAND with the step limit, log it, record the outcome
    local name="$1" skip="$2"; shift 2
    if [ -n "$skip" ]; then results+=("$name|skipped|$skip"); echo "== $name: skipped ($skip)"; return; fi
    if [ "$DRY" = 1 ]; then results+=("$name|dry-run|$*"); echo "== $name: $*"; return; fi
    echo "== $name: $*"
    local started=$SECONDS
    timeout --kill-after=10 "$STEP_LIMIT" "$@" >"$OUT_DIR/$name.log" 2>&1
    local rc=$? took=$((SECONDS - started))
    tail -n 15 "$OUT_DIR/$name.log"
    case $rc in
        0) results+=("$name|pass|${took}s") ;;
        124|137) results+=("$name|TIMEOUT|over ${STEP_LIMIT}s") ;;
        *) results+=("$name|FAIL (exit $rc)|${took}s, see $name.log") ;;
    esac
}

NGPU=$(gpu_count)
echo "GPUs: $NGPU; output: $OUT_DIR"
[ "$DRY" = 1 ] || { nvidia-smi >"$OUT_DIR/nvidia-smi.txt" 2>&1 || true; }

# The python that has torch's CUDA build: python3 itself when it has one (often a venv already,
# whose packages a new --system-site-packages venv would not see), else a venv with it installed.
PY=python3
if [ "$DRY" = 0 ] && ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    python3 -m venv --system-site-packages "$VENV" >"$OUT_DIR/venv.log" 2>&1
    PY="$VENV/bin/python"
    if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>>"$OUT_DIR/venv.log"; then
        echo "installing torch's CUDA build and the lab's needs into $VENV (needs the package index)"
        "$VENV/bin/pip" install -q torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128 >>"$OUT_DIR/venv.log" 2>&1
        "$VENV/bin/pip" install -q numpy prometheus-client matplotlib >>"$OUT_DIR/venv.log" 2>&1
    fi
fi
[ "$DRY" = 1 ] || "$PY" -c 'import torch; print("python", __import__("sys").executable, "torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "devices", torch.cuda.device_count())' | tee "$OUT_DIR/torch.txt"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
LAB=("$PY" -m lab)
netns_skip=""; { [ "$(id -u)" = 0 ] && command -v ip >/dev/null && command -v unshare >/dev/null; } || netns_skip="needs root, ip and unshare"

step nccl-1-node "$([ "$NGPU" -ge 1 ] || echo 'no GPU')" \
    "${LAB[@]}" up --backend nccl --nodes 1 --nproc-per-node "$NGPU" --hosts loopback --prometheus off
"${LAB[@]}" down >/dev/null 2>&1
step nccl-2-netns-nodes "$([ "$NGPU" -ge 2 ] || echo "needs 2 GPUs, has $NGPU")${netns_skip:+; $netns_skip}" \
    "${LAB[@]}" up --backend nccl --nodes 2 --nproc-per-node $((NGPU / 2)) --hosts netns --prometheus off
"${LAB[@]}" down >/dev/null 2>&1
step lesson-set-device-first "" "${LAB[@]}" exercise run set-device-first --report-dir "$OUT_DIR/set-device-first"
step lesson-buffers "" "${LAB[@]}" exercise run buffers --report-dir "$OUT_DIR/buffers"
step nccl-bench "$([ "$NGPU" -ge 1 ] || echo 'no GPU')" \
    "${LAB[@]}" bench collectives --backend nccl --nodes 1 --nproc-per-node "$NGPU" --hosts loopback \
    --min-bytes 1M --max-bytes 256M --factor 16 --ceiling-bytes 64M --out "$OUT_DIR/bench"
# The rank exporter's GPU families, read from this machine's device and NVML.
step gpu-metrics "$([ "$NGPU" -ge 1 ] || echo 'no GPU')" "$PY" -c '
import torch
from prometheus_client import generate_latest
from lab.health.rank_exporter import RankMetrics
torch.cuda.set_device(0)
held = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
text = generate_latest(RankMetrics(rank=0, local_rank=0, node="n", world_size=1, restart=0).registry).decode()
lines = [line for line in text.splitlines() if line.startswith("lab_gpu_")]
print("\n".join(lines))
assert any(line.startswith("lab_gpu_memory_allocated_bytes") and float(line.split()[-1]) >= 256 << 20 for line in lines)
'
# The resumable trainer (checkpoints, DistributedSampler, exporters) under nccl. The fault drills
# pick their own topology, on gloo: a kill-worker drill with nccl is not wired yet.
step trainer-nccl "$([ "$NGPU" -ge 1 ] || echo 'no GPU')" \
    "${LAB[@]}" run --backend nccl --nodes 1 --nproc-per-node "$(( NGPU >= 2 ? 2 : 1 ))" --hosts loopback --prometheus off \
    lab/workloads/trainer.py --steps 60 --ckpt-every 10
"${LAB[@]}" down >/dev/null 2>&1
# FSDP2 (fully_shard per layer) with DCP checkpoints under nccl: each rank's shard on its own GPU.
step trainer-fsdp2-nccl "$([ "$NGPU" -ge 2 ] || echo "needs 2 GPUs, has $NGPU")" \
    "${LAB[@]}" run --backend nccl --nodes 1 --nproc-per-node 2 --hosts loopback --prometheus off \
    lab/workloads/trainer.py --parallel fsdp2 --save async --steps 60 --ckpt-every 10
"${LAB[@]}" down >/dev/null 2>&1
# In-process recovery under nccl: keepers and warm spares on GPUs. auto picks it on gloo only
# (lab.recovery.UNPROVEN_IN_PROCESS) until a run here shows the job comes up and ends whole.
step inprocess-nccl "$([ "$NGPU" -ge 2 ] || echo "needs 2 GPUs, has $NGPU")${netns_skip:+; $netns_skip}" \
    "${LAB[@]}" run --recovery in-process --backend nccl --nodes 2 --nproc-per-node 1 --hosts netns --prometheus off \
    lab/workloads/trainer.py --steps 60 --ckpt-every 10
"${LAB[@]}" down >/dev/null 2>&1

echo; printf '%-26s %-16s %s\n' STEP RESULT DETAIL
for r in "${results[@]}"; do IFS='|' read -r n s d <<<"$r"; printf '%-26s %-16s %s\n' "$n" "$s" "$d"; done | tee "$OUT_DIR/summary.txt"
! grep -qE 'FAIL|TIMEOUT' "$OUT_DIR/summary.txt"
