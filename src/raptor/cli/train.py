"""Fine-tune an MoE classifier with RAPTOR or a baseline, under (epsilon, delta)-DP, and write results.json.

Data: ``--task T --data-dir DIR`` (official GLUE TSV layout), or ``--train-file/--validation-file``
(CSV/TSV/JSONL with ``--text-column``/``--label-column``), or, with neither, the SST-2 sample
bundled with raptor. The public corpus is ``--public-file`` or a deterministic slice of the
training split (``--public-size``, removed from the private set); the rest of the training split
is private. The tokenizer (for tiny families, trained on the public corpus only), the layer
choice, the public owner shares and the per-expert clip norms come from the public corpus.

Model: a tiny family name (``switch_transformers``, ``olmoe``, ...: random init), a local
``save_pretrained`` directory or a hub name.

Outputs in ``--output-dir``: ``results.json`` (config, dev accuracy per evaluation, epsilon and
delta from the ledger, sigma per stream, steps, seconds per step, peak memory, public layer
table) and ``checkpoint/`` (trainable parameters, optimizers, ledger; RNG states for seeded runs
only). ``--resume DIR`` continues a checkpoint's run and ledger.

Privacy: without ``--seed`` the sampling and noise generators are seeded from the OS CSPRNG;
``--seed`` makes the run reproducible and NOT secure. The training loss is never shown (it is a
statistic of private records); the progress bar shows the dev loss and accuracy at evaluation points and
the epsilon spent so far.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

from raptor.errors import ConfigError
from raptor.training.config import (
    METHODS,
    OptimConfig,
    PerformanceConfig,
    PrivacyConfig,
    Schedule,
    TrainConfig,
)


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """Model, data and public-corpus flags shared by ``raptor train`` and ``raptor inspect``."""
    parser.add_argument("--model", default="switch_transformers",
                        help="tiny family name (random init), local save_pretrained dir, or hub name")
    parser.add_argument("--task", default=None, help="GLUE task (sst2, mrpc, rte, ...) read from --data-dir")
    parser.add_argument("--data-dir", default=None, help="GLUE directory in the official TSV layout")
    parser.add_argument("--train-file", default=None, help="CSV/TSV/JSONL training file (private)")
    parser.add_argument("--validation-file", default=None, help="CSV/TSV/JSONL validation file")
    parser.add_argument("--text-column", nargs="+", default=None, help="one text column, or two for pairs")
    parser.add_argument("--label-column", default="label", help="label column of --train-file (default label)")
    parser.add_argument("--public-file", default=None, help="a separate public corpus (CSV/TSV/JSONL)")
    parser.add_argument("--public-size", type=float, default=0.05,
                        help="public slice of the training split: a fraction < 1 or a count (default 0.05)")
    parser.add_argument("--tokenizer", default=None,
                        help="tokenizer dir/file; default: the model's, or WordPiece trained on the public corpus")
    parser.add_argument("--vocab-size", type=int, default=8000, help="WordPiece vocabulary size (tiny families)")
    parser.add_argument("--max-length", type=int, default=128, help="tokens per record (default 128)")
    parser.add_argument("--max-train-samples", type=int, default=None, help="use the first N private records")
    parser.add_argument("--max-eval-samples", type=int, default=None, help="evaluate on the first N dev records")
    parser.add_argument("--hidden-size", type=int, default=64, help="tiny families: d_model (default 64)")
    parser.add_argument("--num-layers", type=int, default=2, help="tiny families: layers (default 2)")
    parser.add_argument("--num-experts", type=int, default=4, help="tiny families: experts per layer (default 4)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_data_arguments(parser)
    parser.add_argument("--method", choices=METHODS, default="raptor")
    parser.add_argument("--epsilon", type=float, default=8.0, help="total epsilon budget (default 8)")
    parser.add_argument("--delta", type=float, default=None, help="delta (default: a power of ten below 1/(N ln N))")
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--steps", type=int, default=None, help="planned updates (overrides --epochs)")
    parser.add_argument("--batch-size", type=int, default=1024, help="expected Poisson batch size B (q = B/N)")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--lr-expert", type=float, default=None, help="expert-stream learning rate (default --lr)")
    parser.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    parser.add_argument("--layers", default="auto", help="'auto' (public routing entropy) or e.g. '1' or '0,1'")
    parser.add_argument("--num-auto-layers", type=int, default=1, help="how many layers 'auto' protects")
    parser.add_argument("--clip", type=float, default=1.0, help="shared clip norm C_s (and dense C)")
    parser.add_argument("--clip-expert", type=float, default=1.0, help="base expert clip norm C")
    parser.add_argument("--clip-rule", choices=("uniform", "median-ratio", "quantile"), default="uniform",
                        help="per-expert clip norms from public gradient norms (default uniform)")
    parser.add_argument("--shared-ratio", type=float, default=0.3)
    parser.add_argument("--alternate", default=None, help="S:X alternating schedule (default simultaneous)")
    parser.add_argument("--denominator", choices=("public", "uniform"), default="public")
    parser.add_argument("--accountant", choices=("pld", "rdp"), default="pld")
    parser.add_argument("--adjacency", choices=("add-remove", "replace-one"), default="add-remove")
    parser.add_argument("--micro-batch-size", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--eval-every", type=int, default=0, help="evaluate every N steps (0: at the end)")
    parser.add_argument("--checkpoint-every", type=int, default=0, help="checkpoint every N steps (0: at the end)")
    parser.add_argument("--output-dir", default="runs/train")
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
        performance=PerformanceConfig(micro_batch_size=args.micro_batch_size, device=args.device),
        optim=OptimConfig(name=args.optimizer, lr=args.lr, lr_expert=args.lr_expert,
                          weight_decay=0.01 if args.optimizer == "adamw" else 0.0),
    )


def _load_splits(args):
    from raptor.data import load_bundled_sst2, load_glue_dir, load_user_files

    if args.train_file:
        if args.task and args.data_dir:
            raise ConfigError("give either --task/--data-dir or --train-file, not both")
        return load_user_files(args.train_file, args.validation_file, text_columns=args.text_column,
                               label_column=args.label_column, task=args.task), f"files {args.train_file}"
    if args.task or args.data_dir:
        if not (args.task and args.data_dir):
            raise ConfigError("--task needs --data-dir (a GLUE directory in the official TSV layout) and vice versa")
        return load_glue_dir(args.data_dir, args.task), f"{args.task} from {args.data_dir}"
    return load_bundled_sst2(), "sst2 (bundled sample)"


def load_data(args):
    """(splits description, PublicPrivateSplit, validation data or None)."""
    from raptor.data import load_user_files, separate_public, split_public_private

    splits, source = _load_splits(args)
    if args.public_file:
        public = load_user_files(args.public_file, text_columns=args.text_column, label_column=args.label_column,
                                 task=args.task, label_names=splits.label_names).train
        split = separate_public(public, splits.train)
    else:
        size = args.public_size
        size = int(size) if size >= 1 else float(size)
        split = split_public_private(splits.train, public_size=size, seed=0)
    return source, split, splits.validation


def load_model_and_tokenizer(args, public, num_labels: int, generator: torch.Generator):
    """A tiny family (random init, WordPiece on the PUBLIC corpus) or a saved/hub model + its tokenizer."""
    from raptor.data import check_tokenizer_matches_model, load_tokenizer, train_wordpiece
    from raptor.moe.models import FAMILIES, TinySize, build_model, load_model

    if args.model in FAMILIES:
        tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer else \
            train_wordpiece(public.corpus(), vocab_size=args.vocab_size, lowercase=True)
        size = TinySize(vocab_size=max(len(tokenizer), 8), hidden_size=args.hidden_size, num_layers=args.num_layers,
                        num_heads=4, num_experts=args.num_experts, top_k=1 if args.model == "switch_transformers" else 2,
                        expert_intermediate=2 * args.hidden_size, max_positions=max(256, args.max_length))
        model = build_model(args.model, num_labels=num_labels, generator=generator, size=size)
    else:
        tokenizer = load_tokenizer(args.tokenizer or args.model)
        model = load_model(args.model, num_labels=num_labels)
    check_tokenizer_matches_model(tokenizer, model.config)
    return model, tokenizer


def to_records(tokenizer, data, max_length: int) -> dict[str, torch.Tensor]:
    """All records of ``data`` as tensors padded to ``max_length`` (a fixed, public shape: padding to
    the longest private record would reveal its length)."""
    from raptor.data import collate, encode

    enc = encode(tokenizer, data, max_length=max_length)
    batch = collate(enc, range(len(enc)))
    pad = max_length - batch["input_ids"].shape[1]
    if pad > 0:
        batch["input_ids"] = torch.nn.functional.pad(batch["input_ids"], (0, pad), value=enc.pad_token_id)
        batch["attention_mask"] = torch.nn.functional.pad(batch["attention_mask"], (0, pad), value=0)
    return batch


def _subset(data, n):
    return data if n is None else data.subset(range(min(n, len(data))))


def run(args: argparse.Namespace) -> int:
    if args.objective == "generate":
        from raptor.cli.train_generate import run_generate

        return run_generate(args)
    from raptor.accounting.ledger import PrivacyLedger
    from raptor.baselines.methods import build_trainer
    from raptor.mechanisms import GeneratorSpec

    config = config_from_args(args)
    started = time.perf_counter()
    source, split, validation = load_data(args)
    private = _subset(split.private, args.max_train_samples)
    validation = _subset(validation, args.max_eval_samples) if validation is not None else None
    init = GeneratorSpec(secure=config.privacy.secure_rng, seed=config.seed).make(3)
    model, tokenizer = load_model_and_tokenizer(args, split.public, private.num_labels, init)
    label_words = _init_head(args, model, tokenizer)
    train = to_records(tokenizer, private, args.max_length)
    public = to_records(tokenizer, split.public, args.max_length)
    val = to_records(tokenizer, validation, args.max_length) if validation is not None else None
    if config.batch_size >= len(private):
        raise ConfigError(f"--batch-size {config.batch_size} must be below the {len(private)} private records")
    trainer = build_trainer(config, model, train=train, validation=val, public=public)
    if args.resume:
        trainer.resume(args.resume, PrivacyLedger.from_dict)
    print(f"raptor train: {config.method} on {source}: {len(private):,} private / {len(split.public):,} public / "
          f"{len(validation) if validation is not None else 0:,} dev records; {trainer.plan.steps} steps, "
          f"q={trainer.sample_rate:.4g}, sigma_s={trainer.plan.sigma_shared}, sigma_e={trainer.plan.sigma_expert}, "
          f"trained layers {list(trainer.setup.trained_layers)}"
          + ("" if config.privacy.secure_rng else "  [SEEDED: reproducible, NOT secure]"))
    results = trainer.fit(progress=not args.no_progress, checkpoint_every=args.checkpoint_every)
    out = config.output_path
    out.mkdir(parents=True, exist_ok=True)
    trainer.save(out / "checkpoint")
    results.update({
        "data": {"source": source, "private_records": len(private), "public_records": len(split.public),
                 "public_rule": split.rule, "dev_records": len(validation) if validation is not None else 0},
        "model": args.model, "head_init": {"rule": args.head_init, "label_words": label_words},
        "num_trainable_parameters": sum(p.numel() for p in trainer.params.values()),
        "total_seconds": time.perf_counter() - started,
    })
    (out / "results.json").write_text(json.dumps(_finite(results), indent=2, default=_json_default,
                                                 allow_nan=False) + "\n")
    eps = results["epsilon"]
    print(f"dev accuracy {results['final_accuracy']}, epsilon {eps:.4g} at delta {results['delta']}"
          if math.isfinite(eps) else f"dev accuracy {results['final_accuracy']} (non-private: epsilon = inf)")
    print(f"wrote {out / 'results.json'}")
    warning = nonfinite_warning(results["nonfinite_records_diagnostic_not_dp"])
    if warning:
        print(warning, file=sys.stderr)
    return 0


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


def _finite(obj):
    """Strict JSON: non-finite floats (epsilon of a non-private run, infinite clip norms) become "inf"."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _json_default(obj):
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")

