"""Gradient composition of a model on PUBLIC records, for the whole model and for each method's
trainable set (issue 22, item 2): per-role median per-record ||g|| and what one global clip
leaves each role. Writes ``<out>.json`` and ``<out>.png``.

    python experiments/composition.py --model-dir src/raptor/data/pretrained/switch-public-tiny \\
        --out experiments/results/composition_sst2_switch

Rows of the JSON: ``all`` (every parameter trainable, routers included: the measurement of
issue 22), then each ``--methods`` entry under the protocol it names: ``raptor`` / ``dpsgd``
(full weights, head trained: the grid's old protocol), ``paper:raptor`` / ``paper:dpsgd`` (the
reference protocol: LoRA, frozen label-word head, last MoE layer). The PNG draws ``all`` and the
first method.

Privacy: public records (a slice of the task's training split, declared public as in the grid)
and the public initial weights only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import run_grid as rg
import torch

HERE = Path(__file__).resolve().parent


def _trainable_of(method: str, net, recs, fx, max_length: int):
    """The trainable set (parameter names of the returned model) of ``method``: ``paper:M`` under
    the reference protocol, else ``M`` with full weights and the head trained."""
    from raptor.training.config import OptimConfig, PerformanceConfig, PrivacyConfig, TrainConfig
    from raptor.training.run.assemble import assemble_run

    paper = method.startswith("paper:")
    name = method.split(":", 1)[1] if paper else method
    cfg = TrainConfig(method=name, steps=1, batch_size=64, seed=0, max_length=max_length,
                      layers="last" if paper else "auto", lora=paper and name not in ("dp-lora", "last-layer"),
                      freeze_head=paper, privacy=PrivacyConfig(epsilon=8.0, secure_rng=False),
                      performance=PerformanceConfig(micro_batch_size=32), optim=OptimConfig())
    tr = assemble_run(cfg, net, train=recs["private"], validation=None, public=recs["public"])
    return tr.model, [n for n, p in tr.model.named_parameters() if p.requires_grad]


def main(argv=None) -> int:
    from raptor.analysis.composition import gradient_composition, plot_composition

    p = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0])
    p.add_argument("--model-dir", required=True, help="the warm start (save_pretrained directory)")
    p.add_argument("--data-dir", default=str(HERE.parent.parent / "shared" / "data" / "glue"))
    p.add_argument("--task", default="sst2")
    p.add_argument("--head-init", choices=("random", "label-words", "public-fit"), default="label-words")
    p.add_argument("--methods", nargs="*", default=["paper:raptor", "raptor"],
                   help="trainable sets to measure besides the whole model (M or paper:M)")
    p.add_argument("--public-size", type=int, default=500)
    p.add_argument("--records", type=int, default=256, help="public records measured (one at a time)")
    p.add_argument("--max-length", type=int, default=40)
    p.add_argument("--clip", type=float, default=None, help="the one global clip C (default: median public ||g||)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=str(HERE / "results" / "composition_sst2_switch"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    start = time.time()
    fx = rg.Fixed(model_dir=str(Path(args.model_dir).resolve()), data_dir=args.data_dir,
                  public_size=args.public_size, selection_size=500, max_train=2000, max_length=args.max_length)
    data = rg.task_data(args.task, fx.data_dir, fx.public_size, fx.selection_size, fx.max_train)
    recs = rg.records_of(fx.model_dir, args.task, fx.data_dir, fx.public_size, fx.selection_size, fx.max_train,
                         args.max_length)
    num_labels = 1 if data.task_type == "regression" else len(data.private.label_names)
    label = rg.model_label("warm", fx.model_dir)
    rows = {}
    for method in ["all", *args.methods]:
        net, _ = rg.make_model(label, fx.model_dir, num_labels, 0, args.head_init, args.task, recs["public"])
        names = None
        if method != "all":
            net, names = _trainable_of(method, net, recs, fx, args.max_length)
        rows[method] = gradient_composition(net, recs["public"], trainable=names, clip=args.clip,
                                            max_records=args.records)
        r = rows[method]
        print(f"{method}: whole set median ||g|| {r['total']['median']:.4g}; one clip C {r['clip']:.3g}")
        for k, v in r["roles"].items():
            if v["trained"]:
                print(f"  {k:12s} median {v['median']:.4g}  sq share {v['median_sq_share']:.2g}  "
                      f"share of clipped {v['median_share_of_clipped']:.2g}")
    out = Path(args.out)
    payload = {"model_dir": fx.model_dir, "task": args.task, "head_init": args.head_init,
               "public_records": args.records, "max_length": args.max_length, "data_rule": data.rule,
               "command": "python experiments/composition.py " + " ".join(sys.argv[1:] if argv is None else argv),
               "seconds": time.time() - start, "rows": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(payload, indent=1, allow_nan=True), encoding="utf-8")
    for method in ["all", *args.methods[:1]]:
        plot_composition(rows[method], out.parent / f"{out.name}_{method.replace(':', '-')}.png",
                         title=f"{Path(fx.model_dir).name} / {args.task} / {args.head_init} head / {method}")
    print(f"wrote {out.with_suffix('.json')} and PNGs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
