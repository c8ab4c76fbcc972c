#!/usr/bin/env bash
# GPU readiness check (<= 10 min on one GPU). Usage: benchmarks/gpu_check.sh [--device cuda|cpu] [--out DIR]
#   1. `raptor check FAMILY` for every family on the device, in float32 (engine vs one-record loop, 1e-4)
#      and in bfloat16 (the bf16 engine vs a float64 copy of the same weights, 3e-2);
#   2. benchmarks/engine_speed.py on the device at the medium config (every family, float32 and
#      bf16) and at larger, real-model shapes (OLMoE-1B-7B, Switch-base-8, DeepSeek-VL2-Tiny
#      scaled in width; bf16): time ratio engine / plain step and peak CUDA memory of each;
#   3. `raptor train` (tiny Switch, bundled SST-2, 12 steps) on the device in float32 and in bf16:
#      seconds per update and peak memory (peak_cuda_mib on CUDA) from results.json;
#   4. the float32 run data-parallel under torchrun with 2 processes (nccl when 2+ GPUs; gloo with
#      --device cpu), which must give the same epsilon.
# --device cpu is the CI-sized dry run: the same steps, engine_speed in --quick sizes.
# Writes JSON under benchmarks/results/gpu/ (or --out) and summary.json (printed, with every peak
# GPU memory figure); exits non-zero on any failure.
set -euo pipefail
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
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
FAMILIES="switch_transformers olmoe mixtral qwen2_moe qwen3_moe deepseek_v2 deepseek_v3"
STATUS=0

echo "== 1. raptor check on $DEVICE (float32, bfloat16)"
for fam in $FAMILIES; do
  for dt in float32 bfloat16; do
    "$PY" -m raptor.cli.main check "$fam" --device "$DEVICE" --dtype "$dt" --json > "$OUT/check_${fam}_${dt}.json" \
      || { echo "raptor check $fam $dt: FAIL"; STATUS=1; }
  done
done

echo "== 2. engine_speed.py on $DEVICE"
SPEED=(--sweep-families --profile --no-opacus --device "$DEVICE" --threads 1)
if [ "$DEVICE" = cpu ]; then SIZE=(--quick --reps 1); LARGE=(--quick --reps 1 --dtype bfloat16 --families olmoe --real)
else SIZE=(--reps 3); LARGE=(--sweep-reps 3 --dtype bfloat16 --families --real OLMoE-1B-7B Switch-base-8 DeepSeek-VL2-Tiny); fi
"$PY" "$HERE/engine_speed.py" "${SPEED[@]}" "${SIZE[@]}" --real --dtype float32 --out "$OUT/engine_speed_medium_float32.json" \
  > "$OUT/engine_speed_medium_float32.log" 2>&1 || { echo "engine_speed medium float32: FAIL"; STATUS=1; }
"$PY" "$HERE/engine_speed.py" "${SPEED[@]}" "${SIZE[@]}" --real --dtype bfloat16 --out "$OUT/engine_speed_medium_bfloat16.json" \
  > "$OUT/engine_speed_medium_bfloat16.log" 2>&1 || { echo "engine_speed medium bfloat16: FAIL"; STATUS=1; }
"$PY" "$HERE/engine_speed.py" "${SPEED[@]}" "${LARGE[@]}" --out "$OUT/engine_speed_large_bfloat16.json" \
  > "$OUT/engine_speed_large_bfloat16.log" 2>&1 || { echo "engine_speed large bfloat16: FAIL"; STATUS=1; }

echo "== 3. raptor train on $DEVICE (float32, bfloat16)"
TRAIN=(--steps 12 --batch-size 64 --max-train-samples 4000 --max-eval-samples 200 --eval-every 0 --seed 0 --no-progress
       --device "$DEVICE")
for dt in float32 bfloat16; do
  "$PY" -m raptor.cli.main train "${TRAIN[@]}" --dtype "$dt" --output-dir "$OUT/train_1proc_$dt" \
    > "$OUT/train_1proc_$dt.log" 2>&1 || { echo "raptor train $dt: FAIL (see $OUT/train_1proc_$dt.log)"; STATUS=1; }
done

NGPU=0
if [ "$DEVICE" != cpu ]; then NGPU=$("$PY" -c "import torch; print(torch.cuda.device_count())"); fi
if [ "$DEVICE" = cpu ] || [ "$NGPU" -ge 2 ]; then
  echo "== 4. torchrun, 2 processes ($([ "$DEVICE" = cpu ] && echo gloo || echo nccl))"
  "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 -m raptor.cli.main train "${TRAIN[@]}" --dtype float32 \
    --distributed --output-dir "$OUT/train_2proc_float32" > "$OUT/train_2proc_float32.log" 2>&1 \
    || { echo "torchrun 2 processes: FAIL (see $OUT/train_2proc_float32.log)"; STATUS=1; }
else
  echo "== 4. torchrun skipped: $NGPU GPU(s)"
fi

"$PY" - "$OUT" "$STATUS" <<'PYEOF'
import json, sys
from pathlib import Path
out, status = Path(sys.argv[1]), int(sys.argv[2])
summary = {"checks": {}, "engine_speed": {}, "train": {}}
for f in sorted(out.glob("check_*.json")):
    try:
        summary["checks"][f.stem] = json.loads(f.read_text())["passed"]
    except (ValueError, KeyError):
        summary["checks"][f.stem] = False
for f in sorted(out.glob("engine_speed_*.json")):
    rows = json.loads(f.read_text())["results"]
    summary["engine_speed"][f.stem] = [{"config": r.get("label"), "time_ratio": r.get("time_ratio"),
                                        "peak_cuda_mib": r.get("peak_cuda_mib"), "error": r.get("error")} for r in rows]
for path in sorted(out.glob("train_*/results.json")):
    r = json.loads(path.read_text())
    summary["train"][path.parent.name] = {k: r.get(k) for k in ("seconds_per_step", "peak_cuda_mib", "peak_rss_mib",
                                                                 "epsilon", "final_accuracy", "world_size")}
float32_eps = {v["epsilon"] for k, v in summary["train"].items() if k.endswith("float32")}
summary["passed"] = (status == 0 and all(summary["checks"].values()) and len(float32_eps) == 1
                     and all(r["error"] is None for rows in summary["engine_speed"].values() for r in rows))
(out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
print(json.dumps(summary, indent=2))
for name, r in summary["train"].items():
    print(f"peak GPU memory {name}: {r['peak_cuda_mib']} MiB" if r["peak_cuda_mib"] is not None
          else f"peak memory {name}: {r['peak_rss_mib']:.0f} MiB RSS (no CUDA)")
for name, rows in summary["engine_speed"].items():
    for r in rows:
        if r["peak_cuda_mib"]:
            print(f"peak GPU memory {name} {r['config']}: {r['peak_cuda_mib']}")
sys.exit(0 if summary["passed"] else 1)
PYEOF
