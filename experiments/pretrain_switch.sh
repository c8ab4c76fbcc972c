#!/bin/sh
# The shipped Switch warm start (seeded; public text without IMDB).
PYTHONPATH=src exec /work/main/.venv/bin/python -m raptor.cli.main pretrain \
  --text ../shared/data/public_text --exclude imdb --family switch_transformers \
  --vocab-size 8192 --hidden-size 128 --num-layers 4 --num-heads 4 --num-experts 8 --expert-intermediate 256 \
  --block-length 128 --batch-size 32 --steps 800 --lr 1e-3 --warmup-steps 40 \
  --eval-every 200 --checkpoint-every 100 --glue-dir ../shared/data/glue --seed 0 --threads 1 \
  --output-dir runs/switch-public-tiny
