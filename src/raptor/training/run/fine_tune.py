"""``raptor.fine_tune``: DP fine-tuning of a model the caller already loaded.

    result = raptor.fine_tune(model, tokenizer, train, validation, config, public=public)

``train`` / ``validation`` / ``public``: lists of dicts (``{"sentence": ..., "label": ...}``), a
``datasets.Dataset`` or :class:`raptor.data.ClassificationData`. Public data is only what the
caller declared (the rule of ``raptor train``, :mod:`raptor.data.public_source`): ``public=``
records, or ``public_size=`` (a slice of ``train``, removed from the private records, given on
purpose). With neither, ``train`` is never sliced: a non-private run uses its own training data
for the routing statistics, a DP run whose method computes nothing from public data (see
:func:`raptor.training.public_stage.public_needs`) runs without, and any other DP run is a
:class:`~raptor.errors.ConfigError` naming what needs public data. ``raptor train`` calls this
same function (with ``public_source=`` the source it resolved). ``results["data"]["public_source"]``
records the source.

``validation`` may also be ``{name: rows}`` for several validation splits (MNLI: ``matched``,
``mismatched``); ``metrics`` names the task's metrics, main first (default: accuracy, or Pearson
and Spearman for float labels; see :mod:`raptor.evaluation.metrics`). Float labels (inferred,
or ``task_type="regression"``) train a one-output head with squared-error loss; the model must
have been built with ``num_labels=1``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from torch import nn

from raptor.data import ClassificationData
from raptor.data.labels import label_map, label_map_line
from raptor.data.loaders import from_records, public_split, to_records
from raptor.data.public import PublicPrivateSplit
from raptor.data.public_source import PublicSource, resolve_public_source
from raptor.errors import BudgetExceededError, ConfigError
from raptor.training.build import build_trainer
from raptor.training.config import TrainConfig, with_batch_size
from raptor.training.fine_tune_args import check_arguments, check_model_fits, refuse_unknown
from raptor.training.methods import METHOD_SPECS
from raptor.training.plan import check_batch_size
from raptor.training.public_stage import check_labelled, public_needs
from raptor.training.trainer import Trainer

Rows = Iterable[Mapping] | ClassificationData


@dataclass(frozen=True)
class FineTuneResult:
    """The trained model, the trainer (ledger, plan, checkpoints) and results.json's content."""

    model: nn.Module
    trainer: Trainer
    results: dict
    tokenizer: object = None  # the run's tokenizer (on resume: the checkpoint's)


def fine_tune(model: nn.Module, tokenizer, train: Rows, validation: Rows | None = None,
              config: TrainConfig | None = None, *, public: Rows | None = None, public_size: float | None = None,
              text_columns: Sequence[str] | None = None, label_column: str = "label",
              metrics: Sequence[str] | None = None, task_type: str = "auto", max_new_tokens: int = 16,
              freeze_shared_experts: bool = False, resume: str | None = None, progress: bool = True,
              checkpoint_every: int = 0, checkpoint_start: bool = False, **unknown) -> FineTuneResult:
    """Fine-tune ``model`` (a loaded HF MoE model of a supported family) with ``config.method``.

    Example (a tiny random OLMoE classifier; ``raptor.fine_tune`` is this function)::

        >>> import torch, raptor
        >>> from raptor.moe.models import TinySize, build_model
        >>> from raptor.data import train_wordpiece
        >>> rows = [{"sentence": f"{w} film", "label": int(w == "good")} for w in ["good", "bad"] * 20]
        >>> tok = train_wordpiece(["good film", "bad film"], vocab_size=40)
        >>> model = build_model("olmoe", generator=torch.Generator().manual_seed(0),
        ...                     size=TinySize(vocab_size=len(tok), hidden_size=16))
        >>> config = raptor.tiny_recipe("dpsgd", steps=1, output_dir="run-doc")  # seeded: NOT secure
        >>> out = raptor.fine_tune(model, tok, rows[:30], rows[30:], config, public=rows[30:], progress=False)
        raptor: labels (label -> id): '0' -> 0, '1' -> 1
        >>> out.results["steps"], out.results["epsilon"] <= 8
        (1, True)

    The objective follows the records: rows of text and labels (lists of dicts, a
    ``datasets.Dataset`` or :class:`raptor.data.ClassificationData`) fine-tune a classifier;
    :class:`raptor.data.qa.QAData` (prompt, answer) or :class:`raptor.data.vqa.VQAData` (image,
    question, answer) records fine-tune a causal LM or DeepSeek-VL2 on the answer tokens only,
    scored by greedy decoding (``max_new_tokens``) with exact match and token F1, before training
    (``results["zero_shot"]``) and at every evaluation point; ``freeze_shared_experts`` keeps the
    MoE shared experts frozen (the reference's DeepSeek-VL2 setting).

    ``config`` defaults to ``TrainConfig()`` (RAPTOR, epsilon 8, secure randomness). Checkpoints
    (``config.output_path / "checkpoint"``, every ``checkpoint_every`` steps and, with
    ``checkpoint_start``, before the first update) hold everything needed to continue the same
    run: the weights, the tokenizer, the plan and public statistics, the ledger, the optimizers
    and the generator states, and a fingerprint of the config and data. ``resume`` continues such a
    checkpoint: a changed config or data set is a :class:`ConfigError` listing what changed, and the
    run's initial weights and tokenizer are taken from the checkpoint (nothing is redrawn). A step
    that would exceed the budget saves a checkpoint (when checkpointing is on) and raises
    :class:`~raptor.errors.BudgetExceededError` whose ``partial`` attribute is the
    :class:`FineTuneResult` so far. ``config.batch_size`` must be below the number of private
    records (:func:`raptor.training.plan.check_batch_size`). Returns a :class:`FineTuneResult`.
    An argument of the wrong type or an unknown keyword is a :class:`ConfigError` naming it
    (:mod:`raptor.training.fine_tune_args`).
    """
    refuse_unknown(unknown)
    return run_fine_tune(model, tokenizer, train, validation, config, public=public, public_size=public_size,
                         text_columns=text_columns, label_column=label_column, metrics=metrics, task_type=task_type,
                         max_new_tokens=max_new_tokens, freeze_shared_experts=freeze_shared_experts, resume=resume,
                         progress=progress, checkpoint_every=checkpoint_every, checkpoint_start=checkpoint_start)


def run_fine_tune(model: nn.Module, tokenizer, train, validation=None, config: TrainConfig | None = None, *,
                  public=None, public_size: float | None = None, text_columns: Sequence[str] | None = None,
                  label_column: str = "label", metrics: Sequence[str] | None = None, task_type: str = "auto",
                  max_new_tokens: int = 16, freeze_shared_experts: bool = False, resume: str | None = None,
                  progress: bool = True, checkpoint_every: int = 0, checkpoint_start: bool = False,
                  public_source: PublicSource | None = None, model_name: str | None = None,
                  base: dict | None = None, comm=None, label_words: Sequence[str] | None = None) -> FineTuneResult:
    """:func:`fine_tune` with the plumbing of ``raptor train`` (both objectives) and the experiments.

    ``public_source``: the source ``public`` came from when the caller already separated it from
    ``train`` (``public`` is then used as is, possibly empty for kind ``none``). ``model_name``: the
    ``save_pretrained`` directory the model was loaded from; the checkpoint then stores only the
    weights not read unchanged from it (``base``: their ``{name: shape}``, by default
    :func:`raptor.training.run_start.base_weights` of ``model_name``). ``comm``: a torchrun job's
    communicator (:func:`raptor.training.distributed.init_communicator`; default one process).
    ``label_words``: the words the head was initialised from, one per label id (printed with the
    label map and saved in results ``labels``).
    """
    from raptor.training.run_checks import fingerprint
    from raptor.training.run_start import base_weights, continue_run, start_run

    config = config if config is not None else TrainConfig()
    checked = check_arguments(model, tokenizer, train, validation, config, public=public, text_columns=text_columns,
                              metrics=metrics, task_type=task_type, checkpoint_every=checkpoint_every,
                              max_new_tokens=max_new_tokens, label_column=label_column)
    text_columns, metrics = checked.text_columns, checked.metrics
    if public_source is None and public is not None and public_size is not None:
        raise ConfigError("give either public= records or public_size=, not both")
    if public_source is not None and public is None:
        raise ConfigError(f"public_source={public_source.kind} needs the public records it designated (public=)")
    if _is_generative(train):
        job = _generative_job(train, validation, config, public=public, public_size=public_size,
                              source=public_source, max_new_tokens=max_new_tokens,
                              freeze_shared_experts=freeze_shared_experts)
    else:
        if freeze_shared_experts:
            raise ConfigError("freeze_shared_experts applies to generative fine-tuning (QAData or VQAData records)")
        job = _classification_job(model, train, validation, config, public=public, public_size=public_size,
                                  source=public_source, text_columns=text_columns, label_column=label_column,
                                  metrics=metrics, task_type=task_type, label_words=label_words)
        if job.label_names:  # issue 35: the label map at the start of every classification run
            print(label_map_line(job.label_names, label_words), flush=True)
    config = with_batch_size(config, len(job.private))  # None: N/10, as raptor train
    check_batch_size(config.batch_size, len(job.private))
    fp = fingerprint(dict(config.to_dict(), **job.fingerprint_config), model=model_name or type(model).__name__,
                     train=job.private, public=job.public, validation=job.validation,
                     label_names=job.label_names, public_source=job.source.to_dict())
    # same run? then its own initial weights and tokenizer: nothing is redrawn or retrained
    start = start_run(model, tokenizer, fingerprint=fp, resume=resume,
                      base=base if base is not None else base_weights(model_name))
    model, tokenizer = start.model, start.tokenizer
    enc = job.encode(model, tokenizer, config)
    trainer = build_trainer(config, model, train=enc.train, validation=enc.validation, public=enc.public,
                            evaluator=enc.evaluator, objective=enc.objective, comm=comm)
    continue_run(trainer, start)
    extra = dict(job.results, **enc.results)
    try:
        results = trainer.fit(progress=progress, checkpoint_every=checkpoint_every, checkpoint_start=checkpoint_start)
    except BudgetExceededError as err:
        err.results.update(extra, stopped_by_budget=str(err))
        err.partial = FineTuneResult(model=trainer.model, trainer=trainer, results=err.results, tokenizer=tokenizer)
        raise
    results.update(extra)
    return FineTuneResult(model=trainer.model, trainer=trainer, results=results, tokenizer=tokenizer)


@dataclass(frozen=True)
class _Encoded:
    """A job's records tokenized with the run's tokenizer, its evaluator or objective, and the
    results entries computed before training (a generative run's zero-shot score)."""

    train: dict
    public: dict
    validation: dict | None
    evaluator: object = None
    objective: object = None
    results: dict = field(default_factory=dict)


@dataclass(frozen=True)
class _Job:
    """One objective's records before encoding: what the fingerprint, the results and the encoder need."""

    private: object
    public: object
    validation: object
    source: PublicSource
    label_names: tuple
    fingerprint_config: dict
    results: dict
    encode: Callable[[nn.Module, object, TrainConfig], _Encoded]


def _classification_job(model, train, validation, config, *, public, public_size, source, text_columns,
                        label_column, metrics, task_type, label_words=None) -> _Job:
    from raptor.training.evaluator import Evaluator
    from raptor.training.objectives import task_type_of

    private = from_records(train, text_columns=text_columns, label_column=label_column, source="train",
                           task_type=task_type)
    kind = private.task_type
    if label_words is not None and len(label_words) != private.num_labels:
        raise ConfigError(f"label_words: {len(label_words)} words for {private.num_labels} labels")
    if metrics and "f1" in metrics and kind == "classification" and private.num_labels > 2:
        raise ConfigError(f"metrics: f1 is the binary F1 of label id 1, but the training labels have "
                          f"{private.num_labels} classes; use accuracy or matthews_correlation")
    if task_type_of(model) != kind:
        raise ConfigError(f"the training labels make this a {kind} task but the model has a {task_type_of(model)} "
                          f"head; build it with num_labels={private.num_labels}")

    def rows(data, where):
        return from_records(data, text_columns=text_columns, label_column=label_column, source=where,
                            label_names=private.label_names if kind == "classification" else None, task_type=kind)

    spec = METHOD_SPECS[config.method]
    if source is None:
        source = resolve_public_source(
            public_file="(public= records)" if public is not None else None, public_size=public_size,
            user_data=True, nonprivate=config.method == "nonprivate", needs=public_needs(config, spec))
        split = public_split(private, source, public=None if public is None else rows(public, "public"))
    else:
        split = PublicPrivateSplit(public=rows(public, "public"), private=private, public_indices=None,
                                   private_indices=tuple(range(len(private))), rule=source.describe())
    check_labelled(source.labelled, config, spec)
    named = {} if validation is None else dict(validation) if _is_named(validation) else {"dev": validation}
    devs = {name: rows(data, f"validation {name}") for name, data in named.items()}

    def encode(model, tokenizer, config) -> _Encoded:
        check_model_fits(model, tokenizer, private.num_labels, kind)  # the run's tokenizer (on resume: the checkpoint's)
        train_rec, public_rec = (to_records(tokenizer, d, config.max_length) for d in (split.private, split.public))
        dev_records = {name: to_records(tokenizer, d, config.max_length) for name, d in devs.items()}
        evaluator = Evaluator(dev_records, task_type=kind, metrics=metrics,
                              batch_size=config.performance.eval_batch_size, device=config.performance.device) \
            if dev_records else None
        return _Encoded(train_rec, public_rec, next(iter(dev_records.values()), None), evaluator=evaluator)

    data = {"private_records": len(split.private), "public_records": len(split.public),
            "public_rule": split.rule, "public_source": source.to_dict(),
            "dev_records": len(next(iter(devs.values()), ())),
            "dev_sets": {name: len(d) for name, d in devs.items()}, "task_type": kind}
    return _Job(split.private, split.public, devs, source, tuple(private.label_names), {},
                {"data": data, "label_map": {str(i): name for i, name in enumerate(private.label_names)},
                 "labels": label_map(private.label_names, label_words)}, encode)


def _is_generative(train) -> bool:
    from raptor.data.qa import QAData
    from raptor.data.vqa import VQAData

    return isinstance(train, (QAData, VQAData))


def _generative_job(train, validation, config, *, public, public_size, source, max_new_tokens,
                    freeze_shared_experts) -> _Job:
    from raptor.training.generate import GenerativeObjective, evaluate_generation
    from raptor.training.generate_inputs import PUBLIC_NEEDS, encode_generative, split_public

    if source is None:
        source = resolve_public_source(public_file="(public= records)" if public is not None else None,
                                       public_size=public_size, user_data=True,
                                       nonprivate=config.method == "nonprivate", needs=PUBLIC_NEEDS)
        public, train = split_public(train, source, public)

    def encode(model, tokenizer, config) -> _Encoded:
        train_rec, public_rec, dev_rec, evaluation = encode_generative(
            model, tokenizer, train, public, validation, max_length=config.max_length, max_new_tokens=max_new_tokens)
        zero_shot = evaluate_generation(model, evaluation, tokenizer) if evaluation is not None else None
        objective = GenerativeObjective(evaluation=evaluation, tokenizer=tokenizer,
                                        freeze_shared_experts=freeze_shared_experts)
        return _Encoded(train_rec, public_rec, dev_rec, objective=objective, results={"zero_shot": zero_shot})

    data = {"private_records": len(train), "public_records": len(public),
            "dev_records": len(validation) if validation is not None else 0,
            "public_rule": source.describe(), "public_source": source.to_dict(), "task_type": "generate"}
    return _Job(train, public, validation, source, (),
                {"objective": "generate", "freeze_shared_experts": freeze_shared_experts},
                {"data": data, "freeze_shared_experts": freeze_shared_experts}, encode)


def _is_named(validation) -> bool:
    """Whether ``validation`` is ``{name: rows}`` (several splits) rather than one split's rows."""
    return isinstance(validation, Mapping) and all(isinstance(k, str) for k in validation) and \
        all(isinstance(v, (ClassificationData, list, tuple)) or hasattr(v, "column_names") for v in validation.values())
