"""Per-record gradient norms and clipping rates at the START of fine-tuning, warm start vs random
init, on PUBLIC records (issue 10, item 2: why the warm start hurt under DP).

For each model (the warm directory, and the same architecture with random weights for a few init
seeds) and each head init (random, label-words), on the public slice of the task's training split
(the grid's GLUE public convention, :mod:`run_grid`):

* ``dense``: the norm of the whole trainable gradient (what DP-SGD clips with one C);
* ``shared``: RAPTOR's shared group (everything trainable but the experts of the trained layer);
* ``experts``: the owner-expert group of each record in the trained layer (pooled, and per expert);
* ``head``: the classification head alone (``||h|| * ||softmax - onehot||``);
* the fraction of records clipped (norm > C) at C in ``--clips``, per group, and the quantiles;
* the public loss and accuracy at the start (what the head init gives before any update).

    python experiments/grad_norms.py --model-dir /work/runs/switch-warm --out experiments/results/grad_norms_sst2.json

Privacy: public records only; the initial weights are public.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import run_grid as rg
import torch

from raptor.analysis.grid import Cell

HERE = Path(__file__).resolve().parent


def stats(norms: torch.Tensor, clips) -> dict:
    n = norms[torch.isfinite(norms)].double()
    if n.numel() == 0:
        return {"records": 0}
    q = torch.quantile(n, torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)).tolist()
    return {"records": int(n.numel()), "mean": float(n.mean()), "p10": q[0], "median": q[1], "p90": q[2],
            "clipped_fraction": {f"{c:g}": float((n > c).double().mean()) for c in clips},
            "mean_clip_factor": {f"{c:g}": float(torch.clamp(c / n.clamp_min(1e-30), max=1.0).mean()) for c in clips}}


def coherence(trainer, public, micro: int) -> dict:
    """Per group: ||sum_i g_i / ||g_i|| || / n over the public records (1: every record's gradient
    points the same way; ~1/sqrt(n): unrelated directions) and the group's dimension d. Under a
    clip that every record exceeds, one step's signal-to-noise is about B * coherence / (sigma * sqrt(d))."""
    from raptor.per_sample.engine import PerRecordEngine  # noqa: F401 - the trainer's engine is one
    from raptor.training.setup.public_stage import batches

    engine = trainer.engine
    keys = list(engine.group_map.keys)
    tiny = 1e-6
    sums: dict[str, torch.Tensor] = {}
    counts = dict.fromkeys(keys, 0)
    for batch in batches(public, micro, "cpu"):
        res = engine.compute(batch, dict.fromkeys(keys, tiny))
        for name, t in res.clipped_sums.items():
            sums[name] = t.detach().double() + sums.get(name, 0.0)
        for k in keys:
            counts[k] += int((res.owners[k.layer] == k.expert_id).sum()) if k.is_expert else int(res.norms[k].numel())
    out = {}
    for k in keys:
        sq, dim = 0.0, 0
        for sl in engine.group_map.groups[k]:
            t = sums.get(sl.name)
            p = engine.group_map.params[sl.name]
            dim += p.numel() if sl.index is None else p[sl.index].numel()
            if t is not None:
                sq += float((t if sl.index is None else t[sl.index]).pow(2).sum())
        name = "expert" if k.is_expert else k.kind
        entry = {"coherence": math.sqrt(sq) / tiny / max(counts[k], 1), "dim": dim, "records": counts[k]}
        if k.is_expert:
            out.setdefault("experts", {})[f"{k.layer}/{k.expert_id}"] = entry
        else:
            out[name] = entry
    return out


def measure(model_kind: str, head: str, seed: int, args, fx: rg.Fixed) -> dict:
    from raptor.per_sample.engine import PerRecordEngine
    from raptor.training.evaluator import Evaluator
    from raptor.training.run.assemble import assemble_run
    from raptor.training.setup.public_stage import batches
    from raptor.training.setup.trainable import head_prefixes

    label = rg.model_label(model_kind, fx.model_dir)
    d = rg.task_data(args.task, fx.data_dir, fx.public_size, fx.selection_size, fx.max_train)
    recs = rg.records_of(fx.model_dir, args.task, fx.data_dir, fx.public_size, fx.selection_size, fx.max_train,
                         fx.max_length)
    num_labels = len(d.private.label_names)
    out: dict = {"model": label, "kind": model_kind, "head": head, "seed": seed}
    pub = recs["public"]
    for method in ("dpsgd", "raptor"):
        cell = Cell(model=label, task=args.task, method=method, epsilon=1.0, seed=seed, stage="tune",
                    hparams={**fx.hparams(), "head": head, "lr": 1e-3})
        net, _ = rg.make_model(label, fx.model_dir, num_labels, seed, head, args.task)
        trainer = assemble_run(rg.build_config(cell, fx, 1.0, 1.0), net, train=recs["private"], validation=None,
                                public=pub)
        norms = rg.public_norms(trainer, pub, fx.micro_batch_size)
        out.setdefault("coherence", {}).update(coherence(trainer, pub, fx.micro_batch_size))
        if method == "dpsgd":
            dense = next(v for k, v in norms.items() if not k.is_expert)
            out["dense"] = stats(dense, args.clips)
            out["trained_layers"] = list(trainer.plan.trained_layers)
            out["trainable_parameters"] = sum(p.numel() for p in trainer.params.values())
            ev = Evaluator({"public": pub}, task_type="classification", metrics=d.metrics)(trainer.model)
            out["public_at_init"] = {"loss": ev["dev_loss"], "accuracy": ev["accuracy"]}
        else:
            shared = next(v for k, v in norms.items() if not k.is_expert)
            experts = {k: v for k, v in norms.items() if k.is_expert}
            out["shared"] = stats(shared, args.clips)
            out["experts"] = stats(torch.cat(list(experts.values())), args.clips)
            out["per_expert_median"] = {f"{k.layer}/{k.expert_id}": (float(v.median()) if v.numel() else None)
                                        for k, v in experts.items()}
            out["per_expert_records"] = {f"{k.layer}/{k.expert_id}": int(v.numel()) for k, v in experts.items()}
    # the head alone: a dense engine over the head's parameters only
    net, _ = rg.make_model(label, fx.model_dir, num_labels, seed, head, args.task)
    heads = head_prefixes(net)
    for name, p in net.named_parameters():
        p.requires_grad_(any(name == h or name.startswith(h + ".") for h in heads))
    engine = PerRecordEngine(net, trained_layers=(), grouping="dense")
    key = engine.group_keys[0]
    vals = [engine.compute(b, {key: math.inf}).norms[key].detach().double() for b in batches(pub, fx.micro_batch_size, "cpu")]
    out["head_only"] = stats(torch.cat(vals), args.clips)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--model-dir", required=True)
    p.add_argument("--data-dir", default=str(HERE.parent.parent / "shared" / "data" / "glue"))
    p.add_argument("--task", default="sst2")
    p.add_argument("--random-seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--heads", nargs="+", default=["random", "label-words"])
    p.add_argument("--clips", nargs="+", type=float, default=[0.1, 0.3, 1.0, 3.0, 10.0])
    p.add_argument("--public-size", type=int, default=500)
    p.add_argument("--max-length", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=str(HERE / "results" / "grad_norms_sst2.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()
    fx = rg.Fixed(model_dir=str(Path(args.model_dir).resolve()), data_dir=args.data_dir, public_size=args.public_size,
                  max_length=args.max_length, batch_size=args.batch_size)
    rows = []
    start = time.perf_counter()
    for head in args.heads:
        for kind, seed in [("warm", 0)] + [("random", s) for s in args.random_seeds]:
            r = measure(kind, head, seed, args, fx)
            rows.append(r)
            print(f"{r['model'][:36]:<36} head={head:<11} seed={r['seed']} public acc at init "
                  f"{r['public_at_init']['accuracy']:.3f}  median norm: dense {r['dense']['median']:.3g} shared "
                  f"{r['shared']['median']:.3g} experts {r['experts']['median']:.3g} head {r['head_only']['median']:.3g}"
                  f"  clipped at C=1: dense {r['dense']['clipped_fraction']['1']:.2f} shared "
                  f"{r['shared']['clipped_fraction']['1']:.2f} experts {r['experts']['clipped_fraction']['1']:.2f}; coherence dense "
                  f"{r['coherence']['dense']['coherence']:.3f} (d {r['coherence']['dense']['dim']}) shared "
                  f"{r['coherence']['shared']['coherence']:.3f}", flush=True)
    from raptor.training.saving.json_io import write_strict_json

    write_strict_json(Path(args.out), {
        "task": args.task, "model_dir": fx.model_dir, "public_records": fx.public_size, "max_length": fx.max_length,
        "data_rule": rg.task_data(args.task, fx.data_dir, fx.public_size, fx.selection_size, fx.max_train).rule,
        "note": ("per-record gradient norms at the initial weights on PUBLIC records (no private record read); "
                 "dense = DP-SGD's one group, shared/experts = RAPTOR's groups, head_only = the classifier alone; "
                 "clipped_fraction = share of records with norm > C"),
        "command": " ".join(["python", "experiments/grad_norms.py", *(argv if argv is not None else sys.argv[1:])]),
        "seconds": time.perf_counter() - start, "rows": rows})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
