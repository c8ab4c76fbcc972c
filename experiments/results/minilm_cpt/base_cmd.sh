# same-code, same-machine baseline on the base model (minilm-moe v2, no continued pre-training)
nice -n 19 .venv/bin/python experiments/minilm_ablations.py --methods raptor dpsgd --epsilon 1 --lr 5e-3 \
  --set shared_ratio=0.9 --seeds 0 1 2 --threads 1 --model-dir /root/.cache/raptor/minilm-moe-v2 \
  --results experiments/results/minilm_cpt/base_v2_ablations.jsonl
nice -n 19 .venv/bin/python experiments/minilm_ablations.py --methods raptor --epsilon 1 --lr 5e-3 \
  --seeds 0 1 2 --threads 1 --model-dir /root/.cache/raptor/minilm-moe-v2 \
  --results experiments/results/minilm_cpt/base_v2_ablations.jsonl
