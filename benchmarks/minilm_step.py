"""The private step against the plain step on the real model (issue 33, item 5): ``minilm-moe``.

One whole training update (:meth:`raptor.training.step.trainer.Trainer.step`: Poisson sample,
micro-batches, per-record engine, noise, n_hat division, optimizer) on the upcycled
all-MiniLM-L6-v2, in the paper protocol (LoRA r 8 on attention and on the last MoE layer's
experts, frozen head), on real SST-2 sentences (the sample bundled with raptor, padded to
``--max-length`` 40 as a run pads them):

* ``plain``: the same trainable set with ordinary autograd (``nonprivate``: one batch loss, one
  backward, no clipping, no noise);
* ``raptor``: the private update, micro-batches length-sorted and trimmed of their padding
  (:func:`raptor.training.step.micro_batch.length_sorted_chunks`, :func:`trim_padding`);
* ``raptor-padded``: the same private update without that (every micro-batch at 40 tokens), to show
  what trimming buys;
* ``dpsgd``: the matched one-clip baseline, trimmed.

Every trainer samples from the same seeded generator, so the four see the same batches. Updates
run round-robin in ABBA order (drift hits every method alike); the table gives medians, and the
ratios of each method's median to ``plain``'s, measured in this one run. Target: raptor / plain
<= 1.3 on CPU.

    .venv/bin/python benchmarks/minilm_step.py              # B 256, 4 timed updates each
    .venv/bin/python benchmarks/minilm_step.py --quick      # B 64, 2 updates (a smoke run)
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

import _common  # noqa: E402

DEFAULT_OUT = _HERE / "results" / "minilm_step.json"
METHODS = ("plain", "raptor", "raptor-padded", "dpsgd")


def _trainers(args):
    import torch
    from transformers import AutoTokenizer

    from raptor.data import load_bundled_sst2
    from raptor.data.loaders import to_records
    from raptor.moe.models import load_model
    from raptor.shipped import resolve
    from raptor.training.config import OptimConfig, PerformanceConfig, PrivacyConfig, TrainConfig
    from raptor.training.run.assemble import assemble_run
    from raptor.training.step import trainer as trainer_mod
    from raptor.training.step.micro_batch import trimmable

    model_dir = resolve(args.model)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    train = to_records(tok, load_bundled_sst2().train, args.max_length)  # the bundled SST-2 sample
    public = {k: v[:64] for k, v in train.items()}
    lengths = train["attention_mask"].sum(1).float()
    out = {}
    for method in METHODS:
        lib = {"plain": "nonprivate", "raptor-padded": "raptor"}.get(method, method)
        privacy = PrivacyConfig(epsilon=None, noise_multipliers=(1.0, 1.0), delta=1e-5,
                                clip_shared=0.01, clip_expert=0.003, secure_rng=False)
        config = TrainConfig(method=lib, steps=10_000, batch_size=args.batch_size, seed=0, lora=True,
                             freeze_head=True, layers="last", max_length=args.max_length, eval_every=0,
                             output_dir="/tmp/raptor_minilm_step", privacy=privacy,
                             performance=PerformanceConfig(micro_batch_size=args.micro_batch_size),
                             optim=OptimConfig(name="adamw", lr=5e-3))
        net = load_model(model_dir, generator=torch.Generator().manual_seed(0))
        tr = assemble_run(config, net, train=train, validation=None, public=public)
        if method == "raptor-padded":
            tr._lengths = None  # every micro-batch at max_length: the step before trimming
        out[method] = tr
    assert trimmable(train)
    stats = {"records": int(train["labels"].shape[0]), "mean_tokens": float(lengths.mean()),
             "max_tokens": int(lengths.max()), "max_length": args.max_length}
    return out, stats, trainer_mod


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0])
    p.add_argument("--model", default="minilm-moe")
    p.add_argument("--batch-size", type=int, default=None, help="expected batch B (default 256; quick 64)")
    p.add_argument("--micro-batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=40)
    p.add_argument("--updates", type=int, default=None, help="timed updates per method (default 4; quick 2)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=None, help=f"JSON path (default {DEFAULT_OUT}; quick: none)")
    args = p.parse_args(argv)
    args.batch_size = args.batch_size or (64 if args.quick else 256)
    reps = args.updates or (2 if args.quick else 4)
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    trainers, stats, _ = _trainers(args)
    times = _common.run_interleaved({m: trainers[m].step for m in METHODS}, warmup=args.warmup, reps=reps,
                                    clocks={"wall": time.perf_counter, "cpu": time.process_time})
    rows = []
    base = {c: _common.summary(times[c]["plain"])["median"] for c in times}
    for m in METHODS:
        row = {"method": m}
        for c in times:
            s = _common.summary(times[c][m])
            row[f"{c}_median_s"] = s["median"]
            row[f"{c}_iqr_s"] = s["iqr"]
            row[f"{c}_ratio"] = s["median"] / base[c]
        rows.append(row)
    print(f"minilm-moe, B {args.batch_size}, micro-batch {args.micro_batch_size}, T {args.max_length} "
          f"(bundled SST-2: mean {stats['mean_tokens']:.1f} tokens), {reps} updates each, {args.threads} thread(s)")
    print(_common.format_table(rows, [("method", "method"), ("wall_median_s", "wall s"), ("wall_ratio", "x plain"),
                                      ("cpu_median_s", "cpu s"), ("cpu_ratio", "cpu x plain")]))
    result = {"rows": rows, "data": stats, "batch_size": args.batch_size, "micro_batch_size": args.micro_batch_size,
              "updates": reps, "threads": args.threads, "machine": platform.machine(), "python": platform.python_version(),
              "torch": torch.__version__, "target": "raptor wall_ratio <= 1.3"}
    out = args.out or (None if args.quick else DEFAULT_OUT)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
