"""Fine-tune an MoE classifier with RAPTOR or a baseline, under (epsilon, delta)-DP, and write results.json.

Data: ``--task T --data-dir DIR`` (official GLUE TSV layout; T is any of sst2, mrpc, rte, cola,
stsb, wnli, qnli, qqp, mnli), ``--task T`` alone (the local Hugging Face datasets cache, read
offline; ``--hf-cache DIR``), or ``--train-file/--validation-file`` (CSV/TSV/JSONL with
``--text-column``/``--label-column``, ``--task-type`` classification/regression, inferred by
default), or, with none, the SST-2 sample bundled with raptor. STS-B and float labels train a
one-output regression head with squared-error loss. Each task is scored with its GLUE metrics
(CoLA Matthews; MRPC/QQP F1 and accuracy; STS-B Pearson and Spearman; MNLI matched and
mismatched accuracy; the others accuracy) at every evaluation point. The public corpus is ``--public-file`` or a deterministic slice of the
training split (``--public-size``, removed from the private set); the rest of the training split
is private. The tokenizer (for tiny families, trained on the public corpus only), the layer
choice, the public owner shares and the per-expert clip norms come from the public corpus.

Model: a tiny family name (``switch_transformers``, ``olmoe``, ...: random init), a local
``save_pretrained`` directory or a hub name.

Outputs in ``--output-dir``: ``results.json`` (config, the task's dev metrics per evaluation, epsilon and
delta from the ledger, sigma per stream, steps, seconds per step, peak memory, public layer
table) and ``checkpoint/`` (trainable parameters, optimizers, ledger; RNG states for seeded runs
only). ``--resume DIR`` continues a checkpoint's run and ledger.

Privacy: without ``--seed`` the sampling and noise generators are seeded from the OS CSPRNG;
``--seed`` makes the run reproducible and NOT secure. The training loss is never shown (it is a
statistic of private records); the progress bar shows the dev loss and the task's main metric at
evaluation points and the epsilon spent so far.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from raptor.data.loaders import DEFAULT_PUBLIC_SIZE, DataSource
from raptor.data.user_files import TASK_TYPES
from raptor.errors import ConfigError
from raptor.training.config import (
    ACCOUNTANTS,
    ADJACENCIES,
    CLIP_RULES,
    DENOMINATORS,
    DTYPES,
    METHODS,
    OPTIMIZERS,
    OptimConfig,
    PerformanceConfig,
    PrivacyConfig,
    Schedule,
    TrainConfig,
)
from raptor.training.loaders import DEFAULT_MODEL, ModelSource

_TC, _PC, _PERF, _OC, _MS = TrainConfig(), PrivacyConfig(), PerformanceConfig(), OptimConfig(), ModelSource()


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """Model, data and public-corpus flags shared by ``raptor train`` and ``raptor inspect``."""
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help="tiny family name (random init), local save_pretrained dir, or hub name")
    parser.add_argument("--task", default=None,
                        help="GLUE task: sst2, mrpc, rte, cola, stsb, wnli, qnli, qqp, mnli; read from --data-dir, "
                             "or without it from the local Hugging Face datasets cache (offline)")
    parser.add_argument("--data-dir", default=None, help="GLUE directory in the official TSV layout")
    parser.add_argument("--hf-cache", default=None,
                        help="datasets cache for --task without --data-dir (default: the datasets library's)")
    parser.add_argument("--task-type", choices=TASK_TYPES, default="auto",
                        help="--train-file labels: classes, or float scores (one-output head, MSE); default auto: "
                             "regression when every label is a number and some is fractional or there are >20 values")
    parser.add_argument("--train-file", default=None, help="CSV/TSV/JSONL training file (private)")
    parser.add_argument("--validation-file", default=None, help="CSV/TSV/JSONL validation file")
    parser.add_argument("--text-column", nargs="+", default=None, help="one text column, or two for pairs")
    parser.add_argument("--label-column", default="label", help="label column of --train-file (default label)")
    parser.add_argument("--public-file", default=None, help="a separate public corpus (CSV/TSV/JSONL)")
    parser.add_argument("--public-size", type=float, default=DEFAULT_PUBLIC_SIZE,
                        help=f"public slice of the training split: a fraction < 1 or a count (default {DEFAULT_PUBLIC_SIZE})")
    parser.add_argument("--tokenizer", default=None,
                        help="tokenizer dir/file; default: the model's, or WordPiece trained on the public corpus")
    parser.add_argument("--vocab-size", type=int, default=_MS.vocab_size, help="WordPiece vocabulary size (tiny families)")
    parser.add_argument("--max-length", type=int, default=_TC.max_length, help=f"tokens per record (default {_TC.max_length})")
    parser.add_argument("--max-train-samples", type=int, default=None, help="use the first N private records")
    parser.add_argument("--max-eval-samples", type=int, default=None, help="evaluate on the first N dev records")
    parser.add_argument("--hidden-size", type=int, default=_MS.hidden_size, help="tiny families: d_model")
    parser.add_argument("--num-layers", type=int, default=_MS.num_layers, help="tiny families: layers")
    parser.add_argument("--num-experts", type=int, default=_MS.num_experts, help="tiny families: experts per layer")


def data_source(args: argparse.Namespace) -> DataSource:
    return DataSource(task=args.task, data_dir=args.data_dir, train_file=args.train_file,
                      validation_file=args.validation_file, text_columns=args.text_column,
                      label_column=args.label_column, public_file=args.public_file, public_size=args.public_size,
                      max_train_samples=args.max_train_samples, max_eval_samples=args.max_eval_samples,
                      hf_cache=getattr(args, "hf_cache", None), task_type=getattr(args, "task_type", "auto"))


def model_source(args: argparse.Namespace) -> ModelSource:
    return ModelSource(model=args.model, tokenizer=args.tokenizer, vocab_size=args.vocab_size,
                       hidden_size=args.hidden_size, num_layers=args.num_layers, num_experts=args.num_experts,
                       max_length=args.max_length)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_data_arguments(parser)
    parser.add_argument("--method", choices=METHODS, default=_TC.method)
    parser.add_argument("--epsilon", type=float, default=_PC.epsilon, help=f"total epsilon budget (default {_PC.epsilon:g})")
    parser.add_argument("--delta", type=float, default=None, help="delta (default: a power of ten below 1/(N ln N))")
    parser.add_argument("--epochs", type=float, default=_TC.epochs)
    parser.add_argument("--steps", type=int, default=None, help="planned updates (overrides --epochs)")
    parser.add_argument("--batch-size", type=int, default=_TC.batch_size, help="expected Poisson batch size B (q = B/N)")
    parser.add_argument("--lr", type=float, default=_OC.lr)
    parser.add_argument("--lr-expert", type=float, default=None, help="expert-stream learning rate (default --lr)")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default=_OC.name)
    parser.add_argument("--layers", default="auto", help="'auto' (public routing entropy) or e.g. '1' or '0,1'")
    parser.add_argument("--num-auto-layers", type=int, default=_TC.num_auto_layers, help="how many layers 'auto' protects")
    parser.add_argument("--clip", type=float, default=_PC.clip_shared, help="shared clip norm C_s (and dense C)")
    parser.add_argument("--clip-expert", type=float, default=_PC.clip_expert, help="base expert clip norm C")
    parser.add_argument("--clip-rule", choices=CLIP_RULES, default=_PC.clip_rule,
                        help=f"per-expert clip norms from public gradient norms (default {_PC.clip_rule})")
    parser.add_argument("--shared-ratio", type=float, default=_PC.shared_ratio)
    parser.add_argument("--alternate", default=None, help="S:X alternating schedule (default simultaneous)")
    parser.add_argument("--denominator", choices=DENOMINATORS, default=_PC.denominator)
    parser.add_argument("--accountant", choices=ACCOUNTANTS, default=_PC.accountant)
    parser.add_argument("--adjacency", choices=ADJACENCIES, default=_PC.adjacency)
    parser.add_argument("--micro-batch-size", type=int, default=_PERF.micro_batch_size)
    parser.add_argument("--memory-budget-mib", type=float, default=None,
                        help="choose the micro-batch size from this budget of working memory per engine call "
                             "(probed on synthetic records of --max-length tokens; overrides --micro-batch-size)")
    parser.add_argument("--device", default=_PERF.device)
    parser.add_argument("--dtype", choices=DTYPES, default=_PERF.dtype,
                        help="weights and activations (bfloat16 on GPUs: norms, clip factors, sums, noise and "
                             "the optimizer's master weights stay float32)")
    from raptor.cli import distributed

    distributed.add_arguments(parser)  # --distributed, --dist-backend, --dist-timeout
    parser.add_argument("--eval-every", type=int, default=_TC.eval_every, help="evaluate every N steps (0: at the end)")
    parser.add_argument("--checkpoint-every", type=int, default=0, help="checkpoint every N steps (0: at the end)")
    parser.add_argument("--output-dir", default=_TC.output_dir)
    parser.add_argument("--seed", type=int, default=None,
                        help="seeded, reproducible and NOT secure run (default: OS CSPRNG)")
    parser.add_argument("--resume", default=None, help="checkpoint directory to continue (same settings)")
    parser.add_argument("--head-init", choices=("random", "label-words"), default="random",
                        help="classification head: random (default) or label-word embeddings x 0.02 (for "
                             "pretrained models; words from --label-words or the GLUE task)")
    parser.add_argument("--label-words", nargs="+", default=None,
                        help="one word per label id, for --head-init label-words (default: the task's)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--objective", choices=("classify", "generate"), default="classify",
                        help="classify (default) or generate: answer-only fine-tuning of a decoder on JSONL "
                             "prompt/answer (or image/question/answer for DeepSeek-VL2), scored by exact match")
    from raptor.cli.train_generate import add_generate_arguments

    add_generate_arguments(parser)


def parse_layers(text: str):
    if text == "auto":
        return "auto"
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError as err:
        raise ConfigError(f"--layers must be 'auto' or comma-separated MoE layer indices, got {text!r}") from err


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    nonprivate = args.method == "nonprivate"
    privacy = PrivacyConfig(
        epsilon=None if nonprivate else args.epsilon, delta=args.delta, clip_shared=args.clip,
        clip_expert=args.clip_expert, clip_rule=args.clip_rule, shared_ratio=args.shared_ratio,
        adjacency=args.adjacency, accountant=args.accountant, schedule=Schedule.parse(args.alternate),
        denominator=args.denominator, secure_rng=args.seed is None,
    )
    return TrainConfig(
        method=args.method, epochs=args.epochs, steps=args.steps, batch_size=args.batch_size, seed=args.seed,
        output_dir=str(args.output_dir), layers=parse_layers(args.layers), num_auto_layers=args.num_auto_layers,
        eval_every=args.eval_every, max_length=args.max_length, privacy=privacy,
        performance=PerformanceConfig(micro_batch_size=args.micro_batch_size, device=args.device,
                                      memory_budget_mib=args.memory_budget_mib, dtype=args.dtype),
        optim=OptimConfig(name=args.optimizer, lr=args.lr, lr_expert=args.lr_expert,
                          weight_decay=0.01 if args.optimizer == "adamw" else 0.0),
    )


def run(args: argparse.Namespace) -> int:
    """parse -> recipe -> build -> fit -> write."""
    from raptor.cli.distributed import check_supported

    check_supported(args)  # --distributed: classification only
    if args.objective == "generate":
        from raptor.cli.train_generate import run_generate

        return run_generate(args)
    from raptor.cli.distributed import communicator_from_args
    from raptor.data.loaders import load_data
    from raptor.mechanisms import GeneratorSpec
    from raptor.training.fine_tune import fine_tune
    from raptor.training.loaders import load_model_and_tokenizer

    config = config_from_args(args)
    started = time.perf_counter()
    comm = communicator_from_args(args)  # one process without --distributed
    data = load_data(data_source(args))
    if data.task_type == "regression" and args.head_init == "label-words":
        from raptor.training.head_init import REGRESSION_REFUSAL

        raise ConfigError(REGRESSION_REFUSAL)
    init = GeneratorSpec(secure=config.privacy.secure_rng, seed=config.seed).make(3)
    model, tokenizer = load_model_and_tokenizer(model_source(args), data.public, data.private.num_labels, init)
    label_words = _init_head(args, model, tokenizer)
    out = fine_tune(model, tokenizer, data.private, data.validation_sets or None, config, public=data.public,
                    metrics=data.metrics, resume=args.resume, progress=not args.no_progress and comm.is_main,
                    checkpoint_every=args.checkpoint_every, comm=comm)
    trainer, results = out.trainer, out.results
    if not comm.is_main:  # rank 0 writes; the others join its checkpoint barrier and leave
        trainer.save(config.output_path / "checkpoint")
        comm.close()
        return 0
    print(f"raptor train: {config.method} on {data.source}: {len(data.private):,} private / {len(data.public):,} "
          f"public / {len(data.validation) if data.validation is not None else 0:,} dev records; {trainer.plan.steps} "
          f"steps, q={trainer.sample_rate:.4g}, sigma_s={trainer.plan.sigmas['shared']}, "
          f"sigma_e={trainer.plan.sigmas['expert']}, trained layers {list(trainer.plan.trained_layers)}"
          + ("" if config.privacy.secure_rng else "  [SEEDED: reproducible, NOT secure]")
          + f"\nrandomness: {trainer.randomness}")
    path = config.output_path
    path.mkdir(parents=True, exist_ok=True)
    trainer.save(path / "checkpoint")
    results.update({
        "data": {"source": data.source, "private_records": len(data.private), "public_records": len(data.public),
                 "public_rule": data.split.rule,
                 "dev_records": len(data.validation) if data.validation is not None else 0,
                 "dev_sets": {name: len(d) for name, d in data.validation_sets.items()},
                 "task_type": data.task_type, "metrics": list(data.metrics)},
        "model": args.model, "head_init": {"rule": args.head_init, "label_words": label_words},
        "num_trainable_parameters": sum(p.numel() for p in trainer.params.values()),
        "total_seconds": time.perf_counter() - started,
    })
    write_results(path / "results.json", results)
    eps = results["epsilon"]
    shown = ", ".join(f"{k} {v:.4f}" for k, v in results["final_metrics"].items()) or "no dev split"
    print(f"dev {shown}; epsilon {eps:.4g} at delta {results['delta']}"
          if math.isfinite(eps) else f"dev {shown} (non-private: epsilon = inf)")
    print(f"wrote {path / 'results.json'}")
    warning = nonfinite_warning(results["nonfinite_records_diagnostic_not_dp"])
    if warning:
        print(warning, file=sys.stderr)
    comm.close()
    return 0


def write_results(path: Path, results: dict) -> None:
    """results.json as strict JSON (non-finite floats as strings)."""
    from raptor.training.json_io import write_strict_json

    write_strict_json(path, results)


def nonfinite_warning(count: int) -> str | None:
    """House rule 4: records whose gradient was non-finite were zeroed (the steps still happened); say so."""
    if not count:
        return None
    return (f"raptor train: warning: {count} record-steps had a non-finite per-record gradient; they were zeroed "
            "before aggregation (every step still happened). This count is NOT protected by DP: do not publish it. "
            "Lower --lr, or train in float32, and check the data for degenerate records.")


def _init_head(args, model, tokenizer) -> list[str] | None:
    """``--head-init label-words``: the head from the label words' embeddings (public; no record read)."""
    from raptor.training.head_init import LABEL_WORDS, init_head_from_label_words

    if args.head_init == "random":
        if args.label_words:
            raise ConfigError("--label-words is used only with --head-init label-words")
        return None
    from raptor.data.tasks import get_task

    words = args.label_words
    if words is None:
        task = get_task(args.task).name if args.task else (None if args.train_file else "sst2")  # bundled: SST-2
        if task not in LABEL_WORDS:
            raise ConfigError("--head-init label-words needs --label-words W1 W2 ... (one per label id) unless "
                              f"--task is one of {', '.join(LABEL_WORDS)}")
        words = list(LABEL_WORDS[task])
    init_head_from_label_words(model, tokenizer, words)
    return list(words)




