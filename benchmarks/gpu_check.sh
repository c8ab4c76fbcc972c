#!/usr/bin/env bash
# GPU readiness check, <= 6 min on one GPU. Usage: benchmarks/gpu_check.sh [--device cuda|cpu] [--out DIR]
# Steps, most important first; each has a time limit, and DIR/summary.json is rewritten after every
# step (benchmarks/gpu_check_steps.py summary), so a stop at any point leaves a summary:
#   1. `raptor train` (tiny Switch, bundled SST-2) on the device in float32, then in bfloat16: seconds per
#      update and peak memory (peak_cuda_mib on CUDA) from results.json;              (limit 60 s each)
#   2. `raptor check FAMILY` for every family in float32 (engine vs one-record loop, 1e-4) and bfloat16
#      (vs a float64 copy of the same weights, 3e-2), all in one process;                    (limit 90 s)
#   3. benchmarks/engine_speed.py, every configuration in one process: each family at the medium
#      config and the real-model shapes (OLMoE-1B-7B, Switch-base-8, DeepSeek-VL2-Tiny scaled in width),
#      in float32 and bfloat16: time ratio private / plain step, ATen-op (kernel) ratio, peak CUDA
#      memory; its JSON is rewritten after every configuration;                            (limit 150 s)
#   4. with 2+ GPUs (or --device cpu): the float32 run data-parallel under torchrun, 2 processes (nccl;
#      gloo on cpu), which must give the same epsilon.                                       (limit 60 s)
# --device cpu is the CI-sized dry run: the same steps at tiny sizes (GPU_CHECK_TORCHRUN=0 skips step 4).
# Exits non-zero if any step failed or ran out of time.
set -uo pipefail
DEVICE=cuda
OUT="$(cd "$(dirname "$0")" && pwd)/results/gpu"
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "gpu_check.sh: unknown argument $1 (use --device cuda|cpu, --out DIR)" >&2; exit 2 ;;
  esac
done
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="${PYTHON:-python}"
mkdir -p "$OUT"
rm -f "$OUT/steps.json" "$OUT/summary.json"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
STEPS=(--out "$OUT")

# step NAME LIMIT_S COMMAND...: run with a time limit, log to OUT/NAME.log, then rewrite the summary.
step() {
  local name="$1" limit="$(($2 * LIMIT_SCALE))"; shift 2
  local t0=$SECONDS
  echo "== $name (limit ${limit}s)"
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || echo "$name: FAIL (exit $rc; see $OUT/$name.log)"
  "$PY" "$HERE/gpu_check_steps.py" summary "${STEPS[@]}" --step "$name" --status "$rc" --seconds "$((SECONDS - t0))"
}

# the limits are the GPU budget's; a shared CPU (CI) gets GPU_CHECK_LIMIT_SCALE times them (default 4)
LIMIT_SCALE=1
if [ "$DEVICE" = cpu ]; then
  LIMIT_SCALE="${GPU_CHECK_LIMIT_SCALE:-4}"
  TRAIN=(--steps 2 --batch-size 16 --set data.max_train_samples=200 --set data.max_eval_samples=50)
  SPEED=(--quick --reps 1 --families olmoe switch_transformers --real)
else
  TRAIN=(--steps 12 --batch-size 64 --set data.max_train_samples=4000 --set data.max_eval_samples=200)
  SPEED=(--reps 3 --real OLMoE-1B-7B Switch-base-8 DeepSeek-VL2-Tiny)
fi
TRAIN+=(--model switch_transformers --set eval_every=0 --seed 0 --no-progress --device "$DEVICE")

for dt in float32 bfloat16; do
  step "train_1proc_$dt" 60 "$PY" -m raptor.cli.main train "${TRAIN[@]}" --set performance.dtype="$dt" --output-dir "$OUT/train_1proc_$dt"
done
step checks 90 "$PY" "$HERE/gpu_check_steps.py" checks --device "$DEVICE" --out "$OUT"
step engine_speed 150 "$PY" "$HERE/engine_speed.py" "${SPEED[@]}" --in-process --sweep-families --profile --no-opacus \
  --threads 1 --device "$DEVICE" --dtype float32 bfloat16 --out "$OUT/engine_speed_$DEVICE.json"

NGPU=0
if [ "$DEVICE" != cpu ]; then NGPU=$("$PY" -c "import torch; print(torch.cuda.device_count())"); fi
if { [ "$DEVICE" = cpu ] && [ "${GPU_CHECK_TORCHRUN:-1}" != 0 ]; } || [ "$NGPU" -ge 2 ]; then
  step train_2proc_float32 60 "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 -m raptor.cli.main train \
    "${TRAIN[@]}" --set performance.dtype=float32 --set run.distributed=true --output-dir "$OUT/train_2proc_float32"
else
  echo "== torchrun skipped ($NGPU GPU(s))"
fi

"$PY" "$HERE/gpu_check_steps.py" summary "${STEPS[@]}" --final
