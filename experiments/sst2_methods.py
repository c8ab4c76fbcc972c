"""Every method on real SST-2 under one budget, with the same batch size and learning-rate grid.

Trains once per (method, learning rate), in process through the library (``raptor.data.loaders``,
``raptor.data.model_source``, ``run_fine_tune``; a TrainConfig built here), on the official SST-2 TSVs, with the same
Poisson sampling, accounting, model and data for every method (METHOD.md, "match them fairly"),
then writes ``experiments/results/sst2_methods.json`` and prints a table: per method, the dev
accuracy at the best learning rate of the grid, epsilon and delta from the ledger, sigma per
stream and seconds per step. Each run's own ``results.json`` stays under ``--runs-dir``.

The learning rate is chosen on the dev split, as usual for GLUE; that choice is not accounted
(the same for every method).

    .venv/bin/python experiments/sst2_methods.py --data-dir ../shared/data/glue
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from pathlib import Path

from raptor.training.config import METHODS

HERE = Path(__file__).resolve().parent


def run_one(args: argparse.Namespace, method: str, lr: float, extra: list[str], tag: str,
            seed: int | None = None) -> dict:
    """One (method, lr, seed) run, skipped when its results.json exists (``--force``: rerun).
    ``extra``: TrainConfig overrides, ``field=value`` with dotted paths (``privacy.shared_ratio=0.7``)."""
    seed = args.seed if seed is None else seed
    out = Path(args.runs_dir) / (f"{tag}-lr{lr:g}" + ("" if seed == args.seed else f"-seed{seed}"))
    result_file = out / "results.json"
    if not result_file.exists() or args.force:
        start = time.perf_counter()
        train_in_process(run_config(args, method, lr, seed, out, extra), args.data_dir)
        print(f"[{time.perf_counter() - start:6.0f}s] {tag} lr={lr:g} seed={seed}", flush=True)
    res = json.loads(result_file.read_text())
    return {"tag": tag, "method": method, "lr": lr, "seed": seed, "extra": extra, "final_accuracy": res["final_accuracy"],
            "best_eval_accuracy": max(e["accuracy"] for e in res["evals"]), "evals": res["evals"],
            "epsilon": res["epsilon"], "delta": res["delta"], "sigma": res["sigma"], "steps": res["steps"],
            "sample_rate": res["sample_rate"], "seconds_per_step": res["seconds_per_step"],
            "peak_rss_mib": res["peak_rss_mib"], "trained_layers": res.get("trained_layers"),
            "num_trainable_parameters": res.get("num_trainable_parameters"), "run_dir": str(out)}


def run_config(args: argparse.Namespace, method: str, lr: float, seed: int, out: Path, extra: list[str]):
    """The run's TrainConfig (seeded: reproducible, NOT secure), with ``extra``'s ``field=value`` overrides."""
    from raptor.training.config import OptimConfig, PerformanceConfig, PrivacyConfig, TrainConfig

    config = TrainConfig(
        method=method, epochs=args.epochs, batch_size=args.batch_size, seed=seed, output_dir=str(out),
        eval_every=args.eval_every, max_length=args.max_length,
        privacy=PrivacyConfig(epsilon=None if method == "nonprivate" else args.epsilon, secure_rng=False),
        performance=PerformanceConfig(micro_batch_size=args.micro_batch_size),
        optim=OptimConfig(lr=lr))
    return with_overrides(config, extra)


def with_overrides(config, overrides: list[str]):
    """``config`` with ``field=value`` overrides (dotted paths into ``TrainConfig.to_dict()``; values
    read as JSON, else as strings): ``optim.name=sgd``, ``privacy.shared_ratio=0.7``."""
    from raptor.training.config import TrainConfig

    d = config.to_dict()
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep:
            raise SystemExit(f"--variant: {item!r} is not field=value (e.g. privacy.shared_ratio=0.7)")
        *path, last = key.split(".")
        node = d
        for part in path:
            node = node[part]
        if last not in node:
            raise SystemExit(f"--variant: {key} is not a TrainConfig field")
        try:
            node[last] = json.loads(text)
        except json.JSONDecodeError:
            node[last] = text
    return TrainConfig.from_dict(d)


@functools.lru_cache(maxsize=4)
def _data(data_dir: str):
    from raptor.data.loaders import DataSource, load_data

    return load_data(DataSource(task="sst2", data_dir=data_dir))


def train_in_process(config, data_dir: str) -> dict:
    """One run through the library: SST-2, raptor train's default model (a tiny Switch whose
    WordPiece is trained on the public split), fine_tune, results.json."""
    from raptor.data.model_source import ModelSource, init_generator, load_model_and_tokenizer
    from raptor.training.run.fine_tune import run_fine_tune
    from raptor.training.run.options import RunOptions
    from raptor.training.saving.json_io import write_strict_json

    data = _data(data_dir)
    model, tokenizer = load_model_and_tokenizer(ModelSource(max_length=config.max_length), data.public,
                                                data.private.num_labels, init_generator(config.seed))
    out = run_fine_tune(model, tokenizer, data.private, data.validation, config, RunOptions(progress=False),
                        public=data.public, public_source=data.public_source)
    results = dict(out.results, model=ModelSource().model,
                   num_trainable_parameters=sum(p.numel() for p in out.trainer.params.values()))
    config.output_path.mkdir(parents=True, exist_ok=True)
    write_strict_json(config.output_path / "results.json", results)
    return results


def _num(value, fmt: str) -> str:
    """A number for the table; None (not applicable) and "inf" (non-private epsilon, as results.json writes it)."""
    if value is None:
        return "-"
    return format(float(value), fmt)


def plot(best: dict[str, dict], path: Path, *, title: str) -> Path:
    """Dev accuracy against updates (left) and final dev accuracy (right) per run, at its best lr."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (curves, bars) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    tab20 = plt.get_cmap("tab20").colors  # more runs than the default cycle's 10 colours: dark shades first
    palette = tab20[0::2] + tab20[1::2]
    for i, (tag, row) in enumerate(best.items()):
        steps = [e["step"] for e in row["evals"]]
        accs = [e["accuracy"] for e in row["evals"]]
        style = "--" if tag == "nonprivate" else "-"
        curves.plot(steps, accs, style, marker="o", markersize=3, color=palette[i % len(palette)],
                    label=f"{tag} (lr {row['lr']:g})")
    curves.set_xlabel("update")
    curves.set_ylabel("dev accuracy")
    curves.grid(alpha=0.3)
    curves.legend(fontsize=7)
    tags = list(best)
    finals = [best[t].get("mean_accuracy", best[t]["final_accuracy"]) for t in tags]
    errors = [best[t].get("std_accuracy") or 0.0 for t in tags]
    colors = ["tab:red" if t.startswith("raptor") else "tab:gray" if t == "nonprivate" else "tab:blue" for t in tags]
    bars.barh(tags, finals, xerr=errors, color=colors, capsize=2)
    low = min(finals) - 0.05
    bars.set_xlim(max(0.0, low), 1.0)
    for y, (t, acc) in enumerate(zip(tags, finals)):
        eps = best[t]["epsilon"]
        label = f"{acc:.3f}" + ("" if eps is None or eps == "inf" else f"  eps {_num(eps, '.2f')}")
        bars.text(acc + errors[y] + 0.005, y, label, va="center", fontsize=7)
    bars.invert_yaxis()
    seeds = max(len(best[t].get("seed_accuracies", [1])) for t in tags)
    bars.set_xlabel("final dev accuracy" + (f" (mean +- std over {seeds} seeds)" if seeds > 1 else ""))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--data-dir", default=str(HERE.parent.parent / "shared" / "data" / "glue"))
    p.add_argument("--methods", nargs="+", default=list(METHODS))
    p.add_argument("--lrs", nargs="+", type=float, default=[1e-3, 3e-3])
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--micro-batch-size", type=int, default=256)
    p.add_argument("--max-length", type=int, default=48)
    p.add_argument("--epsilon", type=float, default=8.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--extra-seeds", nargs="*", type=int, default=[],
                   help="rerun each run's best lr with these seeds too; the table then gives mean and std")
    p.add_argument("--eval-every", type=int, default=66)
    p.add_argument("--variant", nargs=3, action="append", default=[], metavar=("TAG", "METHOD", "OVERRIDES"),
                   help="an extra run per lr: TAG METHOD 'TrainConfig overrides field=value', e.g. "
                        "raptor-r0.7 raptor 'privacy.shared_ratio=0.7' (repeatable)")
    p.add_argument("--sgd-denominator", action="store_true",
                   help="also run raptor under SGD with the public and the uniform denominator")
    p.add_argument("--sgd-lrs", nargs="+", type=float, default=[0.3, 1.0])
    p.add_argument("--runs-dir", default="runs/sst2_methods")
    p.add_argument("--out", default=str(HERE / "results" / "sst2_methods.json"))
    p.add_argument("--plot", default=str(HERE / "results" / "sst2_methods.png"),
                   help="PNG of the curves and final accuracies ('' for none; needs matplotlib: pip install -e '.[plot]')")
    p.add_argument("--force", action="store_true", help="rerun even where results.json exists")
    args = p.parse_args(argv)

    rows = [run_one(args, m, lr, [], m) for m in args.methods for lr in args.lrs]
    for tag, method, extra in args.variant:
        rows += [run_one(args, method, lr, extra.split(), tag) for lr in args.lrs]
    if args.sgd_denominator:
        for denom in ("public", "uniform"):
            rows += [run_one(args, "raptor", lr, ["optim.name=sgd", "optim.weight_decay=0", f"privacy.denominator={denom}"],
                             f"raptor-sgd-{denom}")
                     for lr in args.sgd_lrs]
    best: dict[str, dict] = {}
    for row in rows:
        if row["tag"] not in best or row["final_accuracy"] > best[row["tag"]]["final_accuracy"]:
            best[row["tag"]] = row
    seeds: dict[str, list[dict]] = {}
    for tag, row in best.items():
        seeds[tag] = [row] + [run_one(args, row["method"], row["lr"], row["extra"], tag, seed) for seed in args.extra_seeds]
        accs = [r["final_accuracy"] for r in seeds[tag]]
        row["seed_accuracies"] = accs
        row["mean_accuracy"] = statistics.fmean(accs)
        row["std_accuracy"] = statistics.stdev(accs) if len(accs) > 1 else None
    header = (f"{'run':<20} {'best lr':>8} {'dev acc':>8} {'mean+-std (seeds)':>20} {'epsilon':>8} {'delta':>8} "
              f"{'sigma':<28} {'s/step':>7}")
    print(header)
    print("-" * len(header))
    for tag, row in best.items():
        sigma = ", ".join(f"{k} {_num(v, '.3f')}" for k, v in (row["sigma"] or {}).items() if v is not None) or "-"
        eps, delta = _num(row["epsilon"], ".3f"), _num(row["delta"], ".0e")
        spread = "-" if row["std_accuracy"] is None else \
            f"{row['mean_accuracy']:.4f}+-{row['std_accuracy']:.4f} ({len(row['seed_accuracies'])})"
        print(f"{tag:<20} {row['lr']:>8g} {row['final_accuracy']:>8.4f} {spread:>20} {eps:>8} {delta:>8} {sigma:<28} "
              f"{row['seconds_per_step']:>7.3f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"settings": {k: v for k, v in vars(args).items() if k != "force"},
                                          "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                          "best": best, "runs": rows,
                                          "seed_runs": {t: rs[1:] for t, rs in seeds.items()}}, indent=1))
    print(f"\nwrote {args.out}")
    if args.plot:
        first = next(iter(best.values()))
        delta = next((r["delta"] for r in best.values() if r["delta"] is not None), None)
        title = (f"SST-2, tiny Switch MoE (raptor train's default size), B={args.batch_size}, {first['steps']} "
                 f"updates, target eps={args.epsilon:g}, delta={delta}; best lr of {args.lrs} per method")
        print(f"wrote {plot(best, Path(args.plot), title=title)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
