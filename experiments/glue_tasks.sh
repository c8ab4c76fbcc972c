#!/usr/bin/env bash
# One non-private and one raptor (epsilon = 8) run per GLUE task in ../shared/data/glue, on the tiny
# random-init Switch model, with small settings (about 1 minute per run on a CPU). Writes
# runs/glue_tasks/<task>_<method>/results.json and prints one line per run (the task's GLUE metrics).
set -euo pipefail
GLUE=${GLUE:-../shared/data/glue}
OUT=${OUT:-runs/glue_tasks}
PY=${PY:-python}
SMALL=(--max-train-samples 1000 --max-eval-samples 300 --public-size 300 --steps 20 --batch-size 32
       --max-length 32 --hidden-size 32 --vocab-size 2000 --lr 1e-3 --seed 0 --no-progress)
for task in sst2 mrpc rte stsb wnli; do
  for method in nonprivate raptor; do
    $PY -m raptor.cli.main train --task "$task" --data-dir "$GLUE" --method "$method" --epsilon 8 \
      "${SMALL[@]}" --output-dir "$OUT/${task}_${method}" | tail -2 | head -1 | sed "s/^/$task $method: /"
  done
done
