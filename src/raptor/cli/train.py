"""Fine-tune an MoE classifier with RAPTOR or a baseline, under (epsilon, delta)-DP, and write results.json.

Data: ``--task T --data-dir DIR`` (official GLUE TSV layout; T is any of sst2, mrpc, rte, cola,
stsb, wnli, qnli, qqp, mnli), ``--task T`` alone (the local Hugging Face datasets cache, read
offline; ``--set data.hf_cache=DIR``), or ``--train-file/--validation-file`` (CSV/TSV/JSONL with
``--text-column``/``--label-column``, ``--set data.task_type=`` classification/regression, inferred by
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
from raptor.cli.sections import add_sections
from raptor.data.model_source import ModelSource
from raptor.errors import ConfigError
from raptor.training.config import TrainConfig


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """``raptor inspect``'s flags: every data and model setting of ``raptor train`` that it reads
    (:mod:`raptor.cli.settings`), each as a flag named after its field, and ``--max-length``."""
    from raptor.cli.flags import add_flag
    from raptor.cli.set_fields import leaf_fields
    from raptor.cli.settings import DataSettings, ModelSettings

    for cls, skip in ((DataSettings, GENERATE_FIELDS), (ModelSettings, ("head_init", "label_words"))):
        for name, (f, kind) in leaf_fields(cls).items():
            if name not in skip:
                add_flag(parser, name, f, kind, flag="--" + name.replace("_", "-"), default=f.default)
    f, kind = leaf_fields(TrainConfig)["max_length"]
    add_flag(parser, "max_length", f, kind, default=f.default)


#: data settings of ``--objective generate`` only
GENERATE_FIELDS = ("prompt_field", "answer_field", "image_field", "question_field")


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
        from raptor.training.config import is_private

        extra = dict(nonprivate=not is_private(config.method),
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
    """The flags of ``raptor train``, built from the settings' metadata (:mod:`raptor.cli.flags`), in
    the help sections of :data:`raptor.cli.sections.SECTIONS`."""
    from raptor.cli.flags import add_train_flags

    add_sections(parser)
    add_train_flags(parser)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The run's config (:func:`raptor.cli.flags.resolve_train_args`: the recipe's or the library's
    defaults, then the flags given, then ``--set``), ``args`` completed with every command setting;
    a field error names the flag (``--epsilon must be a positive number``). ``--batch-size`` left to
    its default stays None (the run resolves it to N/10,
    :func:`raptor.training.config.resolve_batch_size`). Resolved once per namespace."""
    from raptor.cli.flags import resolve_train_args

    if getattr(args, "resolved_config", None) is None:
        args.resolved_config = resolve_train_args(args)
    return args.resolved_config


def check_before_training(args: argparse.Namespace) -> TrainConfig:
    """Everything that can be checked before data is read or anything is spent: the flags, the
    output directory, the device, the model name and the checkpoint to resume."""
    from raptor.cli.flag_checks import check_train_args
    from raptor.data.model_source import FAMILY_NAMES, shipped_models
    from raptor.training.run.preflight import check_device, check_model_name, check_output_dir

    config = config_from_args(args)
    check_train_args(args)  # flags the typed configs cannot see
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
    """``run.metric`` when given (checked against the task type), else the task's own metrics."""
    if not getattr(args, "metric", None):
        return tuple(data.metrics)
    from raptor.training.evaluator import metric_names

    try:
        names = metric_names(args.metric, data.split.private.task_type)
    except ConfigError as err:
        raise ConfigError(f"--set run.metric: {err}") from None
    if "f1" in names and data.split.private.task_type == "classification" and data.private.num_labels > 2:
        raise ConfigError(f"--set run.metric=f1 is the binary F1 of label id 1, but the train labels have "
                          f"{data.private.num_labels} classes; use run.metric=accuracy or matthews_correlation")
    return names


def classification_inputs(args: argparse.Namespace, config: TrainConfig) -> Inputs:
    """The records of the data flags, checked against the metric and head flags, then the model
    (:func:`raptor.data.model_source.load_model_and_tokenizer`) and its head."""
    from raptor.data.loaders import load_data
    from raptor.data.model_source import init_generator, load_model_and_tokenizer

    data = load_data(data_source(args, config))
    if data.task_type == "regression" and args.head_init == "label-words":
        raise ConfigError("--set model.head_init=label-words does not apply to regression (STS-B, data.task_type="
                          "regression): a regression head has one output, a score, not one row per label word; "
                          "leave model.head_init to random")
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
    """check -> the objective's inputs -> :func:`raptor.training.run.fine_tune.prepare_run` -> the
    settings line and label map -> fit (checkpoints from step 0) -> final model and results."""
    from raptor.cli.run_output import run_results, save_run, summary_line
    from raptor.cli.torchrun import check_supported, communicator_from_args
    from raptor.cli.train_generate import check_generate_flags, generate_inputs, generate_lines
    from raptor.errors import BudgetExceededError
    from raptor.training.run.fine_tune import prepare_run

    if getattr(args, "set", None) == ["list"]:
        from raptor.cli.flags import settings_list

        print(settings_list())
        return 0
    config_from_args(args)  # every setting resolved: flags, recipe, --set
    check_supported(args)  # run.distributed: classification only
    quiet_transformers(args)
    generate = args.objective == "generate"
    if generate:
        check_generate_flags(args)
    config = check_before_training(args)
    started = time.perf_counter()
    comm = communicator_from_args(args)  # one process without --distributed
    inputs = generate_inputs(args, config) if generate else classification_inputs(args, config)
    label = "raptor train (generate)" if generate else "raptor train"

    prepared = prepare_run(inputs.model, inputs.tokenizer, inputs.private, inputs.validation, config,
                           run_options(args, inputs, is_main=comm.is_main), public=inputs.public,
                           public_source=inputs.source, model_name=args.model, base=inputs.base, comm=comm,
                           label_words=inputs.label_words)
    if comm.is_main:  # prepared: the batch size is resolved, the plan made; nothing is spent yet
        trainer = prepared.trainer
        print(settings_line(args, trainer.config, trainer.num_records,
                            task_type=None if generate else inputs.data.get("task_type"))
              .replace("raptor train:", f"{label}:", 1)
              + ("" if trainer.config.privacy.secure_rng else "  [SEEDED: reproducible, NOT secure]"), flush=True)
        if prepared.label_map:
            print(prepared.label_map, flush=True)
    stopped = None
    try:
        out = prepared.fit()
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
            raise ConfigError("--set model.label_words is used only with --set model.head_init=label-words")
        return None
    from raptor.data.tasks import get_task

    words = args.label_words
    if words is None:
        task = get_task(args.task).name if args.task else (None if args.train_file else "sst2")  # bundled: SST-2
        if task not in LABEL_WORDS:
            raise ConfigError("--set model.head_init=label-words needs --set model.label_words=W1,W2,... (one per label id) unless "
                              f"--task is one of {', '.join(LABEL_WORDS)}")
        words = list(LABEL_WORDS[task])
    from raptor.data.labels import align_label_words, check_label_word_tokens

    if label_names and args.label_words:
        words = align_label_words(label_names, words, "--set model.label_words")
    check_label_word_tokens(tokenizer, words, "--set model.label_words")
    init_head_from_label_words(model, tokenizer, words)
    return list(words)




