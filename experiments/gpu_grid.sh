#!/usr/bin/env bash
# The issue-22 paper grid on one GPU: one process per (method, epsilon) group, all at once, each
# under one time limit. Cells finished before (any sst2_paper*.jsonl in the results folder) are
# skipped; every finished cell is appended to its shard's JSONL at once, so a stop loses only the
# cells in flight. A shard that fails (any error but its time limit) stops every shard at once, with
# its log's tail printed, and the script exits 1: on a GPU lease, one bug would fail every cell (a
# CPU evaluator once failed every cell of a GPU grid at its last step; --on-error record hid it for
# the whole lease). Progress (cells per shard, GPU use) is printed every 30 s and the results are
# packed into OUT/grid.tar.gz (with the logs) after every progress line and at the end.
#
# Usage, from the project root:
#   experiments/gpu_grid.sh --data-dir DIR --out DIR [--limit SECONDS] [--device cuda|cpu]
#                           [--shards N] [--check] [-- extra run_grid.py arguments]
# --check also runs `raptor check` (7 families, float32 and bfloat16) beside the grid.
# An extra argument given after -- overrides the grid's (argparse keeps the last one): the CPU dry
# run in tests/experiments/test_gpu_grid.py shrinks the grid that way.
set -uo pipefail
DEVICE=cuda; DATA=""; OUTDIR=""; LIMIT=500; SHARDS=13; CHECK=0
while [ $# -gt 0 ]; do
  case "$1" in
    --data-dir) DATA="$2"; shift 2 ;;
    --out) OUTDIR="$2"; shift 2 ;;
    --limit) LIMIT="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --shards) SHARDS="$2"; shift 2 ;;
    --check) CHECK=1; shift ;;
    --) shift; break ;;
    *) echo "gpu_grid.sh: unknown argument $1 (see the usage at the top of this file)" >&2; exit 2 ;;
  esac
done
if [ -z "$DATA" ] || [ -z "$OUTDIR" ]; then
  echo "gpu_grid.sh: --data-dir and --out are required" >&2; exit 2
fi
PY="${PYTHON:-python3}"
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$HERE")"
mkdir -p "$OUTDIR"
LOGS="$(mktemp -d)"  # OUT holds only grid.tar.gz: the GPU tool brings back at most 8 files
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
GRID=(--grid sst2_paper --space paper --model-dir "$ROOT/src/raptor/data/pretrained/switch-public-tiny"
      --max-train 0 --batch-size 1024 --epochs 3 --max-length 40 --epsilons 8 1
      --methods raptor dpsgd dpsgd-full raptor-split last-layer dp-lora nonprivate --seeds 0 1 2
      --micro-batch-size 1536 --threads 1 --device "$DEVICE" --data-dir "$DATA" --on-error raise "$@")
RESULTS_DIR="$ROOT/experiments/results"
for a in "$@"; do [ "${prev:-}" = --results-dir ] && RESULTS_DIR="$a"; prev="$a"; done

pids=()
for k in $(seq 0 $((SHARDS - 1))); do
  timeout --kill-after=5 "$LIMIT" "$PY" "$HERE/run_grid.py" "${GRID[@]}" --shard "$k/$SHARDS" \
    > "$LOGS/shard$k.log" 2>&1 &
  pids+=($!)
done
if [ "$CHECK" = 1 ]; then
  timeout --kill-after=5 150 "$PY" "$ROOT/benchmarks/gpu_check_steps.py" checks --device "$DEVICE" \
    --out "$LOGS/check" > "$LOGS/check.log" 2>&1 &
fi

pack() {
  local stage="$LOGS/pack"
  rm -rf "$stage"; mkdir -p "$stage"
  cp "$RESULTS_DIR"/sst2_paper*.jsonl "$LOGS"/*.log "$stage"/ 2>/dev/null
  [ -d "$LOGS/check" ] && cp -r "$LOGS/check" "$stage"/
  tar -czf "$OUTDIR/grid.tar.gz.tmp" -C "$stage" . && mv "$OUTDIR/grid.tar.gz.tmp" "$OUTDIR/grid.tar.gz"
}
progress() {
  local t="$1" line="t=${1}s"
  for k in $(seq 0 $((SHARDS - 1))); do
    local f="$RESULTS_DIR/sst2_paper.shard${k}of${SHARDS}.jsonl"
    line+=" s$k:$( [ -f "$f" ] && wc -l < "$f" || echo 0)"
  done
  command -v nvidia-smi > /dev/null && line+=" gpu:$(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader | tr -d ' ')"
  echo "$line"
}
t0=$SECONDS
FAILED=0
declare -A RC
reap() {  # the exit codes of the shards that ended; one that failed (not its time limit) sets FAILED
  for i in "${!pids[@]}"; do
    if [ -z "${RC[$i]:-}" ] && ! kill -0 "${pids[$i]}" 2> /dev/null; then
      wait "${pids[$i]}"; RC[$i]=$?
      if [ "${RC[$i]}" != 0 ] && [ "${RC[$i]}" != 124 ]; then  # 124: the time limit, expected
        echo "shard $i FAILED (exit ${RC[$i]}); stopping every shard. Its log ends:"
        tail -n 30 "$LOGS/shard$i.log" | tr '\r' '\n' | tail -n 30
        FAILED=1
      fi
    fi
  done
}
while [ -n "$(jobs -rp)" ] && [ "$FAILED" = 0 ]; do
  sleep "${GPU_GRID_POLL:-30}" & wait $!
  reap
  progress $((SECONDS - t0)); pack
done
reap  # a shard that ended after the last poll (the loop stops when no job runs, before reaping it)
if [ "$FAILED" = 1 ]; then
  kill $(jobs -rp) 2> /dev/null; wait; pack; exit 1
fi
wait
progress $((SECONDS - t0)); pack
for k in $(seq 0 $((SHARDS - 1))); do
  echo "== shard $k: $(tail -c 600 "$LOGS/shard$k.log" | tr '\r' '\n' | tail -n 3)"
done
[ "$CHECK" = 1 ] && { echo "== check"; tail -n 20 "$LOGS/check.log"; }
exit 0
