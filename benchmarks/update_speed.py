"""One whole training update, side by side for ``raptor``, ``dpsgd``, ``dp-lora`` and ``nonprivate``.

Every method gets the same random-weight model (same family, size and seed), the same synthetic
"private" records (N records of T real tokens), the same expected batch B (q = B/N, true Poisson
sampling from the same seeded generator, so every method draws the same batches) and the same
micro-batch size. One update is :meth:`raptor.training.step.trainer.Trainer.step`: Poisson sample,
micro-batches through the method's engine, noise and the n_hat division (``release_gradients``),
the ledger, the optimizer step(s). It is timed as a whole and split into phases by wrapping those
calls (benchmark-only instrumentation). The trainers are built first, then the updates run
round-robin (ABBA order across methods), so drift on a shared machine hits every method alike.

Timed separately: building the trainer (the public stage: public routing, layer choice, public
clip norms; the noise plan), and one evaluation pass over the validation records.

Memory: the peak tensor bytes of one update (see ``_common.peak_tensor_bytes``) per method. With
``--memory-budget-mib`` every method picks its own micro-batch size from the budget
(``PerformanceConfig.memory_budget_mib``): the table then shows, per method, the largest micro-batch
that fits and the peak of an update at that size.

Run: ``.venv/bin/python benchmarks/update_speed.py`` (writes ``results/update_speed.json``) or
``--quick``. Noise multipliers are fixed (1.0, 1.0): calibration is not part of an update.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

import _common  # noqa: E402

DEFAULT_OUT = _HERE / "results" / "update_speed.json"
METHODS = ("nonprivate", "raptor", "dpsgd", "dp-lora")
MEDIUM = dict(hidden_size=256, num_layers=4, num_heads=4, num_experts=16, top_k=2, expert_intermediate=256,
              vocab_size=1024)
QUICK = dict(hidden_size=32, num_layers=2, num_heads=4, num_experts=4, top_k=2, expert_intermediate=32,
             vocab_size=256)


def _records(n: int, T: int, vocab: int, gen):
    import torch

    ids = torch.randint(3, vocab, (n, T), generator=gen)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.randint(0, 2, (n,), generator=gen)}


def run(args: argparse.Namespace) -> dict:
    import torch

    import raptor.training.run.assemble as build_module
    import raptor.training.run.distributed as distributed_module
    import raptor.training.step.trainer as trainer_module
    from raptor.moe.models import TinySize

    torch.set_num_threads(args.threads)
    size_kw = QUICK if args.quick else MEDIUM
    size = TinySize(**size_kw, max_positions=max(256, args.seq_len))
    gen = torch.Generator().manual_seed(1)
    train = _records(args.records, args.seq_len, size_kw["vocab_size"], gen)
    public = _records(args.public_records, args.seq_len, size_kw["vocab_size"], gen)
    validation = _records(args.validation_records, args.seq_len, size_kw["vocab_size"], gen)
    total_steps = args.warmup + args.updates + 1  # +1: the memory-measured update
    clock = _common.Clock()
    # benchmark-only instrumentation: phases of Trainer.step and of the assembly (undone at the end)
    wrapped = [(distributed_module.Communicator, "sample", "sample"), (trainer_module, "release_gradients", "noise_and_division"),
               (build_module, "public_stage", "public_stage"), (build_module, "public_routing", "public_routing")]
    originals = [(mod, attr, getattr(mod, attr)) for mod, attr, _ in wrapped]
    for mod, attr, phase in wrapped:
        setattr(mod, attr, clock.wrap(phase, getattr(mod, attr)))
    load_at_start = os.getloadavg()
    try:
        report = _run(args, clock, train, public, validation, size, size_kw, total_steps)
    finally:
        for mod, attr, fn in originals:
            setattr(mod, attr, fn)
    report["environment"]["load_avg_at_start"] = load_at_start
    return report


def _run(args, clock, train, public, validation, size, size_kw, total_steps) -> dict:
    import torch

    from raptor.moe.models import build_model
    from raptor.training.config import OptimConfig, PerformanceConfig, PrivacyConfig, TrainConfig
    from raptor.training.run.assemble import assemble_run

    trainers, setup = {}, {}
    for method in args.methods:
        model = build_model(args.family, size=size, generator=torch.Generator().manual_seed(0))
        config = TrainConfig(
            method=method, steps=total_steps, batch_size=args.batch_size, seed=0, max_length=args.seq_len,
            layers=tuple(args.layers) if args.layers else "auto",
            privacy=(PrivacyConfig(epsilon=None, secure_rng=False) if method == "nonprivate" else
                     PrivacyConfig(epsilon=None, noise_multipliers=(1.0, 1.0), secure_rng=False)),
            performance=PerformanceConfig(micro_batch_size=args.micro_batch_size,
                                          memory_budget_mib=args.memory_budget_mib),
            optim=OptimConfig(lr=1e-3),
        )
        t0 = time.perf_counter()
        trainer = assemble_run(config, model, train=train, validation=validation, public=public)
        setup[method] = dict(clock.take(), total=time.perf_counter() - t0)
        trainer.engine.compute = clock.wrap("engine", trainer.engine.compute)
        trainer._apply = clock.wrap("optimizer", trainer._apply)
        trainers[method] = trainer

    rounds: dict[str, list[dict[str, float]]] = {m: [] for m in args.methods}
    names = list(args.methods)
    for rep in range(args.warmup + args.updates):
        order = names if rep % 2 == 0 else names[::-1]
        for method in order:
            t0 = time.perf_counter()
            trainers[method].step()
            total = time.perf_counter() - t0
            row = clock.take()
            row["total"] = total
            row["other"] = total - sum(v for k, v in row.items() if k != "total")
            if rep >= args.warmup:
                rounds[method].append(row)

    results = {}
    for method in names:
        tr = trainers[method]
        t0 = time.perf_counter()
        tr.evaluate()
        eval_s = time.perf_counter() - t0
        peak_tensor = _common.peak_tensor_bytes(tr.step) if not args.no_memory and tr.state.step < tr.plan.steps \
            else None
        keys = sorted({k for r in rounds[method] for k in r})
        phases = {k: _common.summary([r.get(k, 0.0) for r in rounds[method]])["median"] for k in keys}
        results[method] = {
            "update_s": _common.summary([r["total"] for r in rounds[method]]),
            "phases_s": phases,
            "setup_s": setup[method],
            "evaluate_s": eval_s,
            "peak_update_tensor_bytes": peak_tensor,
            "trainable_params": sum(p.numel() for p in tr.params.values()),
            "micro_batch_size": tr.micro_batch_size,
            "micro_batch_choice": tr.micro_batch.to_dict() if tr.micro_batch is not None else None,
            "num_groups": len(tr.engine.group_map.keys),
        }
    base = results.get("nonprivate", {}).get("update_s", {}).get("median")
    for method in names:
        med = results[method]["update_s"]["median"]
        results[method]["ratio_to_nonprivate"] = med / base if base else None
    return {
        "benchmark": "update_speed",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "model": dict(family=args.family, **size_kw),
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "cpu_count": os.cpu_count(), "load_avg_at_end": os.getloadavg()},
        "results": results,
    }


def table(report: dict) -> str:
    rows = []
    for method, r in report["results"].items():
        p = r["phases_s"]
        rows.append({"method": method, "update_s": r["update_s"]["median"], "iqr": r["update_s"]["iqr"],
                     "x": r["ratio_to_nonprivate"], "engine": p.get("engine"), "noise": p.get("noise_and_division"),
                     "opt": p.get("optimizer"), "sample": p.get("sample"), "other": p.get("other"),
                     "setup": r["setup_s"]["total"], "public": r["setup_s"].get("public_stage", 0.0)
                     + r["setup_s"].get("public_routing", 0.0),
                     "eval": r["evaluate_s"],
                     "MB": (r["peak_update_tensor_bytes"] or 0) / 2**20, "mb": r["micro_batch_size"]})
    cols = [("method", "method"), ("update_s", "update s"), ("iqr", "iqr"), ("x", "x nonprivate"),
            ("engine", "engine s"), ("noise", "noise+div s"), ("opt", "optim s"), ("sample", "sample s"),
            ("other", "other s"), ("setup", "build s"), ("public", "public stage s"), ("eval", "eval s"),
            ("mb", "micro-batch"), ("MB", "peak tensor MB")]
    return _common.format_table(rows, cols)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny model (d=32, 2 layers, E=4), T=16, B=8")
    p.add_argument("--family", default="switch_transformers")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--seq-len", type=int, default=None, help="T (default 128; quick 16)")
    p.add_argument("--batch-size", type=int, default=None, help="expected batch B (default 64; quick 8)")
    p.add_argument("--records", type=int, default=None, help="private records N (default 2048; quick 128)")
    p.add_argument("--public-records", type=int, default=64)
    p.add_argument("--validation-records", type=int, default=128)
    p.add_argument("--micro-batch-size", type=int, default=32)
    p.add_argument("--memory-budget-mib", type=float, default=None,
                   help="choose each method's micro-batch size from this budget (PerformanceConfig.memory_budget_mib)")
    p.add_argument("--layers", nargs="*", type=int, default=None, help="trained MoE layers (default: auto)")
    p.add_argument("--updates", type=int, default=None, help="timed updates per method (default 4; quick 2)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-memory", action="store_true", help="skip the peak-tensor-memory update")
    p.add_argument("--out", type=Path, default=None, help=f"JSON path (default {DEFAULT_OUT}; quick: none)")
    args = p.parse_args(argv)
    q = args.quick
    args.seq_len = args.seq_len or (16 if q else 128)
    args.batch_size = args.batch_size or (8 if q else 64)
    args.records = args.records or (128 if q else 2048)
    args.updates = args.updates or (2 if q else 4)
    report = run(args)
    print(table(report))
    _common.write_report(report, args.out if args.out is not None else (None if q else DEFAULT_OUT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
