"""Fine-tune an MoE classifier with RAPTOR or a baseline, under (epsilon, delta)-DP, and write results.json.

Data: ``--task T --data-dir DIR`` (official GLUE TSV layout; T is any of sst2, mrpc, rte, cola,
stsb, wnli, qnli, qqp, mnli), ``--task T`` alone (the local Hugging Face datasets cache, read
offline; ``--hf-cache DIR``), or ``--train-file/--validation-file`` (CSV/TSV/JSONL with
``--text-column``/``--label-column``, ``--task-type`` classification/regression, inferred by
default), or, with none, the SST-2 sample bundled with raptor. STS-B and float labels train a
one-output regression head with squared-error loss. Each task is scored with its GLUE metrics
(CoLA Matthews; MRPC/QQP F1 and accuracy; STS-B Pearson and Spearman; MNLI matched and
mismatched accuracy; the others accuracy) at every evaluation point.

Public data is only what you declare (:mod:`raptor.data.public_source`): ``--public-file``, the
public corpus shipped in the ``--model`` directory, or ``--public-size K`` (K records, or a
fraction < 1, of the training data, moved to the public side on purpose). A ``--train-file`` is
never sliced by default; GLUE tasks and the bundled sample follow the documented benchmark
convention (5% of the benchmark's training split is public). Without a declared source,
``--method nonprivate`` uses its training data, a DP method that computes nothing from public
data runs without, and any other run stops with an error naming these flags. The tokenizer (for
tiny families, trained on the public corpus only), the layer choice, the public owner shares and
the per-expert clip norms come from the public corpus; results.json records its source.

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

from raptor.cli.run_output import Inputs, nonfinite_warning, quiet_transformers, settings_line
from raptor.cli.sections import add_sections, section
from raptor.data.model_source import DEFAULT_MODEL, ModelSource
from raptor.data.public_source import GLUE_PUBLIC_FRACTION
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
    PRETRAINED_LORA_LR,
    PRETRAINED_LR,
    TINY_LR,
    OptimConfig,
    PerformanceConfig,
    PrivacyConfig,
    Schedule,
    TrainConfig,
    method_default_lr,
)
from raptor.training.names import METRICS

_TC, _PC, _PERF, _OC, _MS = TrainConfig(), PrivacyConfig(), PerformanceConfig(), OptimConfig(), ModelSource()

def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """Model, data and public-corpus flags shared by ``raptor train`` and ``raptor inspect``."""
    data_g, model_g = section(parser, "data"), section(parser, "model")
    model_g.add_argument("--model", default=DEFAULT_MODEL,
                         help=f"tiny family name (random init), local save_pretrained dir, shipped model or hub name "
                              f"(default {DEFAULT_MODEL})")
    data_g.add_argument("--task", default=None,
                        help="GLUE task: sst2, mrpc, rte, cola, stsb, wnli, qnli, qqp, mnli; read from --data-dir, "
                             "or without it from the local Hugging Face datasets cache (offline) (default: none)")
    data_g.add_argument("--data-dir", default=None, help="GLUE directory in the official TSV layout (default: none)")
    data_g.add_argument("--hf-cache", default=None,
                        help="datasets cache for --task without --data-dir (default: the datasets library's)")
    data_g.add_argument("--task-type", choices=TASK_TYPES, default="auto",
                        help="--train-file labels: classes, or float scores (one-output head, MSE); default auto: "
                             "regression when every label is a number and some is fractional or there are >20 values")
    data_g.add_argument("--train-file", default=None,
                        help="CSV/TSV/JSONL training file (private) (default: the bundled SST-2 sample)")
    data_g.add_argument("--validation-file", default=None, help="CSV/TSV/JSONL validation file (default: none)")
    data_g.add_argument("--text-column", nargs="+", default=None,
                        help="one text column, or two for pairs (default: sentence1 sentence2, else sentence, else text)")
    data_g.add_argument("--label-column", default="label", help="label column of --train-file (default label)")
    data_g.add_argument("--public-file", default=None,
                        help="a public corpus (CSV/TSV/JSONL with the task's columns) you may use without privacy "
                             "(default: none; a --model directory may ship one)")
    data_g.add_argument("--public-size", type=float, default=None,
                        help="designate a slice of the training data as public on purpose: a count, or a fraction "
                             "< 1; those records lose DP protection (default: none for --train-file; GLUE tasks "
                             f"and the bundled sample: the benchmark convention, {GLUE_PUBLIC_FRACTION:g} of the "
                             "training split)")
    model_g.add_argument("--tokenizer", default=None,
                         help="tokenizer dir/file (default: the model's, or WordPiece trained on the public corpus)")
    model_g.add_argument("--vocab-size", type=int, default=_MS.vocab_size, help=f"WordPiece vocabulary size (tiny families) (default {_MS.vocab_size})")
    data_g.add_argument("--max-length", type=int, default=_TC.max_length, help=f"tokens per record (default {_TC.max_length})")
    data_g.add_argument("--max-train-samples", type=int, default=None, help="use the first N private records (default: all)")
    data_g.add_argument("--max-eval-samples", type=int, default=None, help="evaluate on the first N dev records (default: all)")
    model_g.add_argument("--hidden-size", type=int, default=_MS.hidden_size, help=f"tiny families: d_model (default {_MS.hidden_size})")
    model_g.add_argument("--num-layers", type=int, default=_MS.num_layers, help=f"tiny families: layers (default {_MS.num_layers})")
    model_g.add_argument("--num-experts", type=int, default=_MS.num_experts, help=f"tiny families: experts per layer (default {_MS.num_experts})")


def data_source(args: argparse.Namespace, config: TrainConfig | None = None):
    """The data flags as a :class:`raptor.data.loaders.DataSource`; with ``config`` (``raptor
    train``), what the run needs from public data follows its method
    (:func:`raptor.training.setup.public_stage.public_needs`)."""
    from raptor.data.loaders import DataSource

    extra = {}
    if config is not None:
        from raptor.training.methods import METHOD_SPECS
        from raptor.training.setup.public_stage import public_needs

        trains_tokenizer = model_source(args).is_tiny and not args.tokenizer
        extra = dict(nonprivate=config.method == "nonprivate",
                     needs_public=public_needs(config, METHOD_SPECS[config.method], trains_tokenizer=trains_tokenizer))
    return DataSource(task=args.task, data_dir=args.data_dir, train_file=args.train_file,
                      validation_file=args.validation_file, text_columns=args.text_column,
                      label_column=args.label_column, public_file=args.public_file, public_size=args.public_size,
                      max_train_samples=args.max_train_samples, max_eval_samples=args.max_eval_samples,
                      hf_cache=getattr(args, "hf_cache", None), task_type=getattr(args, "task_type", "auto"),
                      model=args.model, **extra)


def model_source(args: argparse.Namespace) -> ModelSource:
    return ModelSource(model=args.model, tokenizer=args.tokenizer, vocab_size=args.vocab_size,
                       hidden_size=args.hidden_size, num_layers=args.num_layers, num_experts=args.num_experts,
                       max_length=args.max_length)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``raptor train``, in the help sections of :data:`raptor.cli.sections.SECTIONS`."""
    from raptor.cli import torchrun
    from raptor.cli.recipe import add_recipe_arguments
    from raptor.cli.train_generate import add_generate_arguments

    add_sections(parser)
    add_data_arguments(parser)
    _add_method_arguments(section(parser, "method"))
    _add_privacy_arguments(section(parser, "privacy"))
    _add_optimisation_arguments(section(parser, "optimisation"))
    _add_run_arguments(section(parser, "run"))
    torchrun.add_arguments(parser)  # --distributed, --dist-backend, --dist-timeout
    _add_head_arguments(section(parser, "model"))
    add_recipe_arguments(parser)
    add_generate_arguments(parser)


def _add_method_arguments(method_g) -> None:
    """``raptor train``'s method flags."""
    method_g.add_argument("--method", choices=METHODS, default=_TC.method, help=f"training method (default {_TC.method})")
    method_g.add_argument("--layers", default=None,
                          help="'auto' (the public routing entropy picks one layer; 'auto:K' picks K), 'last' (the "
                               "last MoE layer), 'all' (every MoE layer) or MoE layer indices, e.g. '1' or '0,1' (default auto)")
    method_g.add_argument("--alternate", default=None, help="S:X alternating schedule (default simultaneous)")
    method_g.add_argument("--denominator", choices=DENOMINATORS, default=_PC.denominator,
                          help=f"expert denominators: public n_hat or uniform B/E (default {_PC.denominator})")
    method_g.add_argument("--objective", choices=("classify", "generate"), default="classify",
                          help="classify (default) or generate: answer-only fine-tuning of a decoder on JSONL "
                               "prompt/answer (or image/question/answer for DeepSeek-VL2), scored by exact match")


def _add_privacy_arguments(privacy_g) -> None:
    """``raptor train``'s privacy flags."""
    privacy_g.add_argument("--epsilon", type=float, default=_PC.epsilon, help=f"total epsilon budget (default {_PC.epsilon:g})")
    privacy_g.add_argument("--delta", type=float, default=None, help="delta (default: a power of ten below 1/(N ln N))")
    privacy_g.add_argument("--clip", type=float, default=_PC.clip_shared,
                           help=f"shared clip norm C_s (and dense C) (default {_PC.clip_shared:g})")
    privacy_g.add_argument("--clip-expert", type=float, default=_PC.clip_expert,
                           help=f"base expert clip norm C (default {_PC.clip_expert:g})")
    privacy_g.add_argument("--clip-rule", choices=CLIP_RULES, default=_PC.clip_rule,
                           help=f"per-expert clip norms from public gradient norms (default {_PC.clip_rule})")
    privacy_g.add_argument("--shared-ratio", type=float, default=None,
                           help=f"share of the budget given to the shared stream (default {_PC.shared_ratio:g})")
    privacy_g.add_argument("--accountant", choices=ACCOUNTANTS, default=_PC.accountant,
                           help=f"privacy accountant (default {_PC.accountant})")
    privacy_g.add_argument("--adjacency", choices=ADJACENCIES, default=_PC.adjacency,
                           help=f"neighbouring datasets (default {_PC.adjacency})")
    privacy_g.add_argument("--seed", type=int, default=None,
                           help="seeded, reproducible and NOT secure run (default: OS CSPRNG)")


def _add_optimisation_arguments(optim_g) -> None:
    """``raptor train``'s optimisation flags."""
    optim_g.add_argument("--epochs", type=float, default=_TC.epochs,
                         help=f"passes over the private data (default {_TC.epochs:g})")
    optim_g.add_argument("--steps", type=int, default=None, help="planned updates (default: from --epochs)")
    optim_g.add_argument("--batch-size", type=int, default=None,
                         help="expected Poisson batch size B, q = B/N (default: N/10, at least 8, at most 1024)")
    optim_g.add_argument("--lr", type=float, default=None,
                         help=f"learning rate (default {PRETRAINED_LORA_LR:g} for a pre-trained model under LoRA, "
                              f"{PRETRAINED_LR:g} on its full weights (--no-lora), {TINY_LR:g} for a tiny model)")
    optim_g.add_argument("--lr-expert", type=float, default=None, help="expert-stream learning rate (default: --lr)")
    optim_g.add_argument("--optimizer", choices=OPTIMIZERS, default=_OC.name, help=f"optimizer (default {_OC.name})")


def _add_run_arguments(run_g) -> None:
    """``raptor train``'s run flags."""
    run_g.add_argument("--micro-batch-size", type=int, default=_PERF.micro_batch_size,
                       help=f"records per engine call; memory only, no effect on the result "
                            f"(default {_PERF.micro_batch_size})")
    run_g.add_argument("--memory-budget-mib", type=float, default=None,
                       help="choose the micro-batch size from this budget of working memory per engine call "
                            "(probed on synthetic records of --max-length tokens; overrides --micro-batch-size) "
                            "(default: none)")
    run_g.add_argument("--device", default=_PERF.device, help=f"cpu, cuda, cuda:N or mps (default {_PERF.device})")
    run_g.add_argument("--dtype", choices=DTYPES, default=_PERF.dtype,
                       help="weights and activations (bfloat16 on GPUs: norms, clip factors, sums, noise and "
                            f"the optimizer's master weights stay float32) (default {_PERF.dtype})")
    run_g.add_argument("--eval-every", type=int, default=_TC.eval_every,
                       help=f"evaluate every N steps, 0: at the end (default {_TC.eval_every})")
    run_g.add_argument("--checkpoint-every", type=int, default=0,
                       help="checkpoint every N steps; a checkpoint is always written before the first and after "
                            "the last step (default 0: only those)")
    run_g.add_argument("--output-dir", default=_TC.output_dir,
                       help=f"results.json, checkpoint/ and model/ (default {_TC.output_dir}); must not hold another "
                            "run unless --overwrite")
    run_g.add_argument("--overwrite", action="store_true", help="replace a run already in --output-dir (default off)")
    run_g.add_argument("--resume", default=None,
                       help="OUTPUT_DIR/checkpoint of a run to continue (same settings and data) (default: none)")
    run_g.add_argument("--no-progress", action="store_true",
                       help="no progress bars, transformers' loading/writing bars included (default: shown)")
    run_g.add_argument("--set", action="append", default=None, metavar="FIELD=VALUE",
                       help="any other config field by its dotted path, type-checked against the configs: e.g. "
                            "--set privacy.pseudo_count=0.5 --set optim.betas=0.9,0.95 --set optim.weight_decay=0 "
                            "(repeatable; an unknown FIELD lists them all) (default: none)")
    run_g.add_argument("--metric", nargs="+", default=None, choices=METRICS,
                       help="dev metrics, the first is the main one (default: the task's; accuracy for a "
                            "classification --train-file, pearson and spearman for regression)")


def _add_head_arguments(model_g) -> None:
    """``raptor train``'s model (the head) flags."""
    model_g.add_argument("--head-init", choices=("random", "label-words"), default=None,
                         help="classification head: random (default; label-words under --recipe) or label-word "
                              "embeddings x 0.02 (for pretrained models; words from --label-words or the GLUE task)")
    model_g.add_argument("--label-words", nargs="+", default=None,
                         help="one word per label id, for --head-init label-words (default: the task's)")


def parse_layers(text: str) -> tuple[str | tuple[int, ...], int]:
    """``--layers`` as the config's (``layers``, ``num_auto_layers``): 'auto' (one layer), 'auto:K',
    'last', 'all' or comma-separated MoE layer indices."""
    default = TrainConfig.num_auto_layers
    if text in ("auto", "last", "all"):
        return text, default
    try:
        if text.startswith("auto:"):
            return "auto", int(text[len("auto:"):])
        return tuple(int(v) for v in text.split(",")), default
    except ValueError as err:
        raise ConfigError(f"--layers must be 'auto', 'auto:K' (K layers), 'last', 'all' or comma-separated MoE layer "
                          f"indices, got {text!r}") from err


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The run's config; a field error names the flag (``--epsilon must be a positive number``).
    ``--batch-size`` left to its default stays None (the run resolves it to N/10,
    :func:`raptor.training.config.resolve_batch_size`), ``--lr`` the default of the model kind
    (:func:`method_default_lr`)."""
    from raptor.cli.recipe import apply_recipe
    from raptor.cli.set_fields import apply_sets
    from raptor.training.run.preflight import flag_message

    try:
        return apply_sets(_config_from_args(apply_recipe(args)), getattr(args, "set", None))
    except ConfigError as err:
        raise flag_message(err) from None


def _config_from_args(args: argparse.Namespace) -> TrainConfig:
    from raptor.cli.recipe import lora_settings

    layers, num_auto = parse_layers(args.layers)
    nonprivate = args.method == "nonprivate"
    privacy = PrivacyConfig(
        epsilon=None if nonprivate else args.epsilon, delta=args.delta, clip_shared=args.clip,
        clip_expert=args.clip_expert, clip_rule=args.clip_rule, shared_ratio=args.shared_ratio,
        adjacency=args.adjacency, accountant=args.accountant, schedule=Schedule.parse(args.alternate),
        denominator=args.denominator, secure_rng=args.seed is None, shared_split=args.shared_split,
    )
    config = TrainConfig(
        method=args.method, epochs=args.epochs, steps=args.steps, seed=args.seed, batch_size=args.batch_size,
        output_dir=str(args.output_dir), layers=layers, num_auto_layers=num_auto,
        eval_every=args.eval_every, max_length=args.max_length, privacy=privacy,
        **lora_settings(args, args.method), freeze_head=args.freeze_head,
        performance=PerformanceConfig(micro_batch_size=args.micro_batch_size, device=args.device,
                                      memory_budget_mib=args.memory_budget_mib, dtype=args.dtype),
        optim=OptimConfig(name=args.optimizer, lr=args.lr if args.lr is not None else
                          method_default_lr(args.model, args.method, bool(args.lora)),
                          lr_expert=args.lr_expert),
    )
    return config


def check_before_training(args: argparse.Namespace) -> TrainConfig:
    """Everything that can be checked before data is read or anything is spent: the flags, the
    output directory, the device, the model name and the checkpoint to resume."""
    from raptor.cli.flag_checks import check_train_args
    from raptor.data.model_source import FAMILY_NAMES, shipped_models
    from raptor.training.run.preflight import check_device, check_model_name, check_output_dir

    check_train_args(args)  # flags the typed configs cannot see
    config = config_from_args(args)
    check_output_dir(config.output_path, overwrite=True, resume=True)  # a directory path that can be written
    from raptor.cli.run_lock import lock_output_dir

    lock_output_dir(config.output_path, distributed=args.distributed)  # one run per --output-dir
    check_output_dir(config.output_path, overwrite=args.overwrite, resume=bool(args.resume))
    check_device(args.device)
    check_model_name(args.model, FAMILY_NAMES, shipped_models())
    if args.resume:
        from raptor.training.saving.checkpoint import read_state

        read_state(args.resume)  # exists, is a checkpoint, is readable
    return config


def _metrics(args: argparse.Namespace, data) -> tuple[str, ...]:
    """``--metric`` when given (checked against the task type), else the task's own metrics."""
    if not getattr(args, "metric", None):
        return tuple(data.metrics)
    from raptor.training.evaluator import metric_names

    try:
        names = metric_names(args.metric, data.split.private.task_type)
    except ConfigError as err:
        raise ConfigError(f"--metric: {err}") from None
    if "f1" in names and data.split.private.task_type == "classification" and data.private.num_labels > 2:
        raise ConfigError(f"--metric f1 is the binary F1 of label id 1, but the train labels have "
                          f"{data.private.num_labels} classes; use --metric accuracy or matthews_correlation")
    return names


def classification_inputs(args: argparse.Namespace, config: TrainConfig) -> Inputs:
    """The records of the data flags, checked against the metric and head flags, then the model
    (:func:`raptor.data.model_source.load_model_and_tokenizer`) and its head."""
    from raptor.data.loaders import load_data
    from raptor.data.model_source import init_generator, load_model_and_tokenizer

    data = load_data(data_source(args, config))
    if data.task_type == "regression" and args.head_init == "label-words":
        from raptor.training.setup.head_init import REGRESSION_REFUSAL

        raise ConfigError(REGRESSION_REFUSAL)
    metrics = _metrics(args, data)  # before the model is built (--metric f1 on 3 classes)
    model, tokenizer = load_model_and_tokenizer(model_source(args), data.public, data.private.num_labels,
                                                init_generator(config.seed))
    label_words = _init_head(args, model, tokenizer, data.private.label_names)
    # the library's data entry, with what only the CLI knows: the source's name, the slice rule, the metrics
    return Inputs(model, tokenizer, data.private, data.validation_sets or None, data.public, data.public_source,
                  label_names=tuple(data.private.label_names), label_words=label_words, metrics=metrics,
                  data={"source": data.source, "public_rule": data.split.rule, "metrics": list(metrics),
                        "task_type": data.task_type})


def run_options(args: argparse.Namespace, inputs: Inputs, *, is_main: bool = True):
    """The run's :class:`~raptor.training.run.options.RunOptions` from the flags."""
    from raptor.training.run.options import RunOptions

    generate = args.objective == "generate"
    return RunOptions(metrics=inputs.metrics, max_new_tokens=args.max_new_tokens,
                      freeze_shared_experts=generate and args.freeze_shared_experts, resume=args.resume,
                      progress=not args.no_progress and is_main, checkpoint_every=args.checkpoint_every,
                      checkpoint_start=True)


def run(args: argparse.Namespace) -> int:
    """check -> the objective's inputs -> :func:`raptor.training.run.fine_tune.run_fine_tune`
    (checkpoints from step 0) -> final model and results."""
    from raptor.cli.run_output import run_results, save_run, summary_line
    from raptor.cli.torchrun import check_supported, communicator_from_args
    from raptor.cli.train_generate import check_generate_flags, generate_inputs, generate_lines
    from raptor.errors import BudgetExceededError
    from raptor.training.run.fine_tune import run_fine_tune

    check_supported(args)  # --distributed: classification only
    quiet_transformers(args)
    generate = args.objective == "generate"
    if generate:
        check_generate_flags(args)
    config = check_before_training(args)
    started = time.perf_counter()
    comm = communicator_from_args(args)  # one process without --distributed
    inputs = generate_inputs(args, config) if generate else classification_inputs(args, config)
    label = "raptor train (generate)" if generate else "raptor train"

    def announce(trainer) -> None:  # the batch size is resolved now
        print(settings_line(args, trainer.config, trainer.num_records,
                            task_type=None if generate else inputs.data.get("task_type"))
              .replace("raptor train:", f"{label}:", 1)
              + ("" if trainer.config.privacy.secure_rng else "  [SEEDED: reproducible, NOT secure]"), flush=True)

    stopped = None
    try:
        out = run_fine_tune(inputs.model, inputs.tokenizer, inputs.private, inputs.validation, config,
                            run_options(args, inputs, is_main=comm.is_main), public=inputs.public,
                            public_source=inputs.source, model_name=args.model, base=inputs.base, comm=comm,
                            label_words=inputs.label_words, announce=announce if comm.is_main else None)
    except BudgetExceededError as err:  # the checkpoint is saved; write results and the model, then fail
        stopped, out = err, err.partial
    trainer, results = out.trainer, out.results
    path = config.output_path
    if not comm.is_main:  # rank 0 writes; the others join its checkpoint barrier and leave
        trainer.save(path / "checkpoint")
        comm.close()
        if stopped is not None:
            raise stopped
        return 0
    results["data"].update(inputs.data)
    zero_shot = results.get("zero_shot") if generate else None
    print(summary_line(trainer, results["data"], label=label)
          + (f"; zero-shot exact match {zero_shot['exact_match']:.3f}" if zero_shot else "")
          + (f"; resumed at step {trainer.state.step}" if generate and args.resume else "")
          + f"\nrandomness: {trainer.randomness}")
    results.update(run_results(args, trainer, started))
    if generate:
        results["final_model"] = str(path / "model")
    else:
        results["head_init"] = {"rule": args.head_init, "label_words": inputs.label_words}
    path.mkdir(parents=True, exist_ok=True)
    save_run(path, trainer, out.tokenizer, inputs.label_names, trainer.config.max_length, results, stopped)
    for line in (generate_lines(results, path) if generate else _classification_lines(results, path)):
        print(line)
    warning = nonfinite_warning(results["nonfinite_records_diagnostic_not_dp"])
    if warning:
        print(warning, file=sys.stderr)
    comm.close()
    return 0


def _classification_lines(results: dict, path) -> list[str]:
    eps = results["epsilon"]
    shown = ", ".join(f"{k} {v:.4f}" for k, v in results["final_metrics"].items()) or "no dev split"
    return [f"dev {shown}; epsilon {eps:.4g} at delta {results['delta']}"
            if math.isfinite(eps) else f"dev {shown} (non-private: epsilon = inf)",
            f"wrote {path / 'results.json'} and the fine-tuned model in {path / 'model'} "
            f"(raptor predict --model {path} --input FILE)"]


def _init_head(args, model, tokenizer, label_names=()) -> list[str] | None:
    """``--head-init label-words``: the head from the label words' embeddings (public; no record read).
    Words that are the label names go to those labels, in any order; words that the tokenizer cannot
    tell apart are refused. Returns the words in label-id order."""
    from raptor.training.setup.head_init import LABEL_WORDS, init_head_from_label_words

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
    from raptor.data.labels import align_label_words, check_label_word_tokens

    if label_names and args.label_words:
        words = align_label_words(label_names, words)
    check_label_word_tokens(tokenizer, words)
    init_head_from_label_words(model, tokenizer, words)
    return list(words)




