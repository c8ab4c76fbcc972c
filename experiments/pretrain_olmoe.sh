#!/bin/sh
# The top-k warm start for the grid's second family: OLMoE (causal LM), on the same public text
# (without IMDB) and with the shipped Switch model's tokenizer. Run from the repository root:
#   sh experiments/pretrain_olmoe.sh [--resume]
# 2,400 steps of 64 x 64 tokens, 4.46 M parameters; about 30 min of one core (it ran 2.5 h on a
# shared machine, paused and resumed twice; resume is exact). Output: runs/olmoe-warm (a
# save_pretrained directory, tokenizer, pretrain.json, routing.png); its pretrain.json and
# routing.png are copied to experiments/results/pretrain_olmoe/.
set -e
exec .venv/bin/raptor pretrain \
  --text ../shared/data/public_text --exclude imdb --family olmoe --tokenizer src/raptor/data/pretrained/switch-public-tiny \
  --hidden-size 128 --num-layers 4 --num-heads 4 --num-experts 8 --top-k 2 --expert-intermediate 256 \
  --block-length 64 --batch-size 64 --steps 2400 --lr 2e-3 --warmup-steps 100 \
  --eval-every 400 --checkpoint-every 100 --glue-dir ../shared/data/glue --seed 0 --threads 1 --no-progress \
  --output-dir runs/olmoe-warm "$@"
