# started 05:20 UTC with --threads 1 (the other engineer's pytest was running); a first start at
# --threads 2 / 480 steps was killed after 5 minutes for that reason. THREADS may be changed on --resume
# (threads are not part of the run's settings).
THREADS=${THREADS:-1}
nice -n 19 .venv/bin/raptor pretrain --init-from minilm-moe --text /work/shared/data/public_text \
  --output-dir /root/runs/minilm-moe-cpt --steps 400 --batch-size 32 --lr 1e-4 --warmup-steps 80 \
  --eval-every 200 --checkpoint-every 100 --save-dtype float32 --threads $THREADS --no-progress $RESUME
