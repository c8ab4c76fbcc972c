#!/bin/sh
# The shipped Switch warm start, switch-public-tiny (seeded; public text without IMDB), then its copy
# into the package. Run from the repository root:  sh experiments/pretrain_switch.sh
# About 40 minutes on 2 busy CPU cores. Bit-identical weights need the same torch build and --threads (the run was resumed once; resume is exact).
set -e
PYTHONPATH=src python -m raptor.cli.main pretrain \
  --text ../shared/data/public_text --exclude imdb --family switch_transformers \
  --vocab-size 4096 --hidden-size 128 --num-layers 4 --num-heads 4 --num-experts 8 --expert-intermediate 256 \
  --block-length 64 --batch-size 64 --steps 2400 --lr 2e-3 --warmup-steps 100 --mask-prob 0.2 \
  --eval-every 400 --checkpoint-every 100 --glue-dir ../shared/data/glue --seed 0 --threads 1 --no-progress \
  --output-dir runs/switch-warm "$@"
# copy into src/raptor/data/pretrained/switch-public-tiny/ and print the sha256 of every file
PYTHONPATH=src python experiments/ship_pretrained.py runs/switch-warm --name switch-public-tiny
