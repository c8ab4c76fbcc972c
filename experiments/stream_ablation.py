"""Which stream carries the task? One private stream at a time, in the issue-22 paper protocol.

RAPTOR splits one step's privacy between the shared stream (attention LoRA) and the expert stream
(per-expert LoRA of the last MoE layer). At the reference's shared ratio 0.3 the shared stream's
noise multiplier is 1.8x DP-SGD's, in exchange for an expert stream with its own small clip. That
trade pays only if the experts can move the task. This script measures it directly: ``shared-only``
(attention LoRA alone, one clip) and ``expert-only`` (the experts' LoRA alone, per-expert clips and
the public n-hat), each a full-SST-2 cell of the grid (`run_grid.py --space paper`: 66,349 private
records, B 1024, 3 epochs, epsilon 8, C at the public median of its own groups), at the learning
rate the grid selected for dpsgd and raptor (2e-3), seeds 0 1 2, dev accuracy.

Diagnostic cells, not part of the seven-method table: no tuning stage of their own. With a grid
method and an lr outside its search space (``--methods raptor dpsgd --lr 8e-3 --results
experiments/results/sst2_paper_lr_probe.jsonl``) the same script probes the search space's edge.
Resumable: finished cells are in experiments/results/sst2_paper_streams.jsonl and are skipped; each
cell is claimed while it runs (raptor.analysis.claims), so a second copy of the script skips it.

    python experiments/stream_ablation.py [--seeds 0] [--epsilon 8] [--threads 1]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _run_grid_module():
    spec = importlib.util.spec_from_file_location("run_grid_for_streams", HERE / "run_grid.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["run_grid_for_streams"] = mod
    spec.loader.exec_module(mod)
    return mod


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--epsilon", type=float, default=8.0)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--methods", nargs="+", default=["shared-only", "expert-only"],
                   choices=("shared-only", "expert-only", "raptor", "raptor-head", "dpsgd-head", "dpsgd", "dpsgd-full",
                            "last-layer", "dp-lora"),
                   help="shared-only and expert-only: the stream ablation; the grid's methods: a probe of one "
                        "learning rate outside their search space (--lr, --results); raptor-head: RAPTOR with the "
                        "head trained in its one shared clip at shared ratio 0.9 (dp-lora's head, plus the "
                        "expert stream); dpsgd-head: its control, the same parameters under one clip")
    p.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data" / "glue"))
    p.add_argument("--model-dir", default=str(ROOT / "src" / "raptor" / "data" / "pretrained" / "switch-public-tiny"))
    p.add_argument("--max-train", type=int, default=0, help="private records (0: all; a smaller value is a smoke run)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--results", default=str(HERE / "results" / "sst2_paper_streams.jsonl"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    rg = _run_grid_module()
    rg.SPACE = "paper"
    from raptor.analysis.grid import Cell

    fx = rg.Fixed(model_dir=str(Path(args.model_dir).resolve()), data_dir=args.data_dir, public_size=500,
                  selection_size=500, max_train=args.max_train or None, max_length=40, batch_size=args.batch_size,
                  epochs=args.epochs, delta=1e-5,
                  head="label-words", micro_batch_size=64, device=args.device)
    model = rg.model_label("warm", fx.model_dir)
    cells = []
    for method in args.methods:
        h = {**rg.search_space(method)[-1], "lr": args.lr}  # the space's settings at the given lr
        cells += [Cell(model=model, task="sst2", method=method, epsilon=args.epsilon, seed=s, stage="final",
                       hparams={**fx.hparams(), **h}) for s in args.seeds]

    # two copies of this script on one results file each take the cells the other is not running
    rg.run_final_cells(cells, fx, args.results, desc="streams")
    return 0


if __name__ == "__main__":
    sys.exit(main())
