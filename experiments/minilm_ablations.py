"""Ablations around the minilm-moe table (issue 33, item 4): one setting changed at a time.

Each cell is a final cell of ``run_grid.py --space minilm`` (same data: the SST-2 training split's
500-record public slice and 500-record selection slice, both declared public; a seeded private
subsample of ``--max-train`` records; the GLUE dev split reported) at one learning rate, with
``--set KEY=VALUE`` overriding the method's settings of that space:

    python experiments/minilm_ablations.py --methods raptor --epsilon 1 --lr 5e-3 --set shared_ratio=0.9
    python experiments/minilm_ablations.py --methods raptor dpsgd --epsilon 1 --lr 5e-3 \\
        --model-dir /tmp/minilm-moe-e8          # another upcycling (raptor upcycle --experts 8)
    python experiments/minilm_ablations.py --methods raptor dpsgd --epsilon 1 --lr 5e-3 --set head=label-words

Keys: ``shared_ratio``, ``clip_rule``, ``layers`` ("last", "auto", "0,5"), ``opt`` (adamw, sgd),
``lr_expert``, ``freeze_head`` (true/false), ``lora`` (true/false), ``head`` (public-fit,
label-words, random), ``clip`` (a number, pub-median, pub-q90), ``epochs``.
Diagnostic cells, not a tuned table: no tuning stage. Resumable: finished cells are lines of
``--results`` (default experiments/results/sst2_minilm_ablations.jsonl) and are skipped; each cell
is claimed while it runs, so two copies of the script share the work.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BOOLS = {"true": True, "false": False}


def _run_grid_module():
    spec = importlib.util.spec_from_file_location("run_grid_for_minilm", HERE / "run_grid.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["run_grid_for_minilm"] = mod
    spec.loader.exec_module(mod)
    return mod


def parse_set(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set takes KEY=VALUE, got {item!r}")
        if value.lower() in BOOLS:
            out[key] = BOOLS[value.lower()]
        else:
            try:
                out[key] = float(value) if any(c in value for c in ".e") and key not in ("layers", "head") else int(value)
            except ValueError:
                out[key] = value
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0])
    p.add_argument("--methods", nargs="+", default=["raptor", "dpsgd"])
    p.add_argument("--epsilon", type=float, default=1.0, help="target epsilon (0: the non-private method's None)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--set", nargs="*", default=[], help="KEY=VALUE overrides of the method's minilm-space settings")
    p.add_argument("--model-dir", default=None, help="default: the built minilm-moe (raptor.shipped.resolve)")
    p.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data" / "glue"))
    p.add_argument("--max-train", type=int, default=4000)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--head-init", default="public-fit")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--results", default=str(HERE / "results" / "sst2_minilm_ablations.jsonl"))
    p.add_argument("--head-only", action="store_true",
                   help="no training: the dev accuracy of the initial model with its --head-init head (the floor)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    rg = _run_grid_module()
    rg.SPACE = "minilm"
    from raptor.analysis.grid import Cell

    if args.model_dir is None:
        from raptor.shipped import resolve

        args.model_dir = str(resolve("minilm-moe"))
    fx = rg.Fixed(model_dir=str(Path(args.model_dir).resolve()), data_dir=args.data_dir, public_size=500,
                  selection_size=500, max_train=args.max_train or None, max_length=40, batch_size=args.batch_size,
                  epochs=args.epochs, delta=1e-5, head=args.head_init, micro_batch_size=64)
    if args.head_only:
        return head_only(rg, fx, args)
    overrides = parse_set(args.set)
    model = rg.model_label("warm", fx.model_dir)
    cells = []
    for method in args.methods:
        base = {**fx.hparams(), **rg.search_space(method)[0], "lr": args.lr}
        eps = None if method == "nonprivate" else args.epsilon
        cells += [Cell(model=model, task="sst2", method=method, epsilon=eps, seed=s, stage="final",
                       hparams={**base, **overrides}) for s in args.seeds]

    rg.run_final_cells(cells, fx, args.results, desc="ablations", shown={"overrides": overrides})
    return 0


def head_only(rg, fx, args) -> int:
    """The floor: dev accuracy of the initial model and head (``--head-init``), no private record read."""
    from raptor.training.evaluator import Evaluator

    d = rg.task_data("sst2", fx.data_dir, fx.public_size, fx.selection_size, fx.max_train)
    recs = rg.records_of(fx.model_dir, "sst2", fx.data_dir, fx.public_size, fx.selection_size, fx.max_train,
                         fx.max_length)
    net, _ = rg.make_model(rg.model_label("warm", fx.model_dir), fx.model_dir, len(d.private.label_names), 0,
                           args.head_init, "sst2", recs["public"])
    scores = Evaluator({"dev": recs["dev"]}, task_type=d.task_type, metrics=d.metrics, batch_size=256)(net)
    out = {"head_only": args.head_init, "model": rg.model_label("warm", fx.model_dir), "dev": scores["accuracy"],
           "metrics": scores["metrics"]}
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
