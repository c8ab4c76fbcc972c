"""The objectives' records before and after encoding: a classification job and a generative job.

A job is what :func:`raptor.training.run.fine_tune.run_fine_tune` needs from the records of one
objective before the model is touched: the private, public and validation records (public data is
only what the caller declared, :mod:`raptor.data.public_source`), the public source, the label
names, what the fingerprint and the results add, and an ``encode`` step that tokenizes them with the
run's tokenizer (on resume: the checkpoint's) and makes the evaluator or the objective.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from torch import nn

from raptor.data import ClassificationData
from raptor.data.labels import label_map
from raptor.data.loaders import from_records, public_split, to_records
from raptor.data.public import PublicPrivateSplit
from raptor.data.public_source import PublicSource, resolve_public_source
from raptor.errors import ConfigError
from raptor.training.config import TrainConfig
from raptor.training.methods import METHOD_SPECS
from raptor.training.run.options import RunOptions, check_model_fits
from raptor.training.setup.public_stage import check_labelled, public_needs


@dataclass(frozen=True)
class Encoded:
    """A job's records tokenized with the run's tokenizer, its evaluator or objective, and the
    results entries computed before training (a generative run's zero-shot score)."""

    train: dict
    public: dict
    validation: dict | None
    evaluator: object = None
    objective: object = None
    results: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Job:
    """One objective's records before encoding: what the fingerprint, the results and the encoder need."""

    private: object
    public: object
    validation: object
    source: PublicSource
    label_names: tuple
    fingerprint_config: dict
    results: dict
    encode: Callable[[nn.Module, object, TrainConfig], Encoded]


def classification_job(model, train, validation, config: TrainConfig, options: RunOptions, *, public, source, text_columns,
                       metrics, label_words=None) -> Job:
    """The job of classification (or regression) records; ``text_columns`` and ``metrics`` as checked
    (:func:`raptor.training.run.options.check_arguments`), the rest from ``options``."""
    from raptor.per_sample.task_losses import task_type_of
    from raptor.training.evaluator import Evaluator

    label_column, task_type, public_size = options.label_column, options.task_type, options.public_size
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
            user_data=True, nonprivate=not spec.private, needs=public_needs(config, spec))
        split = public_split(private, source, public=None if public is None else rows(public, "public"))
    else:
        split = PublicPrivateSplit(public=rows(public, "public"), private=private, public_indices=None,
                                   private_indices=tuple(range(len(private))), rule=source.describe())
    check_labelled(source.labelled, config, spec)
    named = {} if validation is None else dict(validation) if is_named(validation) else {"dev": validation}
    devs = {name: rows(data, f"validation {name}") for name, data in named.items()}

    def encode(model, tokenizer, config) -> Encoded:
        check_model_fits(model, tokenizer, private.num_labels, kind)  # the run's tokenizer (on resume: the checkpoint's)
        train_rec, public_rec = (to_records(tokenizer, d, config.max_length) for d in (split.private, split.public))
        dev_records = {name: to_records(tokenizer, d, config.max_length) for name, d in devs.items()}
        evaluator = Evaluator(dev_records, task_type=kind, metrics=metrics,
                              batch_size=config.performance.eval_batch_size, device=config.performance.device) \
            if dev_records else None
        return Encoded(train_rec, public_rec, next(iter(dev_records.values()), None), evaluator=evaluator)

    data = {"private_records": len(split.private), "public_records": len(split.public),
            "public_rule": split.rule, "public_source": source.to_dict(),
            "dev_records": len(next(iter(devs.values()), ())),
            "dev_sets": {name: len(d) for name, d in devs.items()}, "task_type": kind}
    return Job(split.private, split.public, devs, source, tuple(private.label_names), {},
                {"data": data, "label_map": {str(i): name for i, name in enumerate(private.label_names)},
                 "labels": label_map(private.label_names, label_words)}, encode)


def is_generative(train) -> bool:
    from raptor.data.qa import QAData
    from raptor.data.vqa import VQAData

    return isinstance(train, (QAData, VQAData))


def generative_job(train, validation, config: TrainConfig, options: RunOptions, *, public, source) -> Job:
    """The job of (prompt, answer) or (image, question, answer) records."""
    from raptor.data.generate_inputs import PUBLIC_NEEDS, encode_generative, split_public
    from raptor.training.generate import GenerativeObjective, evaluate_generation

    public_size, max_new_tokens = options.public_size, options.max_new_tokens
    freeze_shared_experts = options.freeze_shared_experts

    if source is None:
        source = resolve_public_source(public_file="(public= records)" if public is not None else None,
                                       public_size=public_size, user_data=True,
                                       nonprivate=not METHOD_SPECS[config.method].private, needs=PUBLIC_NEEDS)
        public, train = split_public(train, source, public)

    def encode(model, tokenizer, config) -> Encoded:
        train_rec, public_rec, dev_rec, evaluation = encode_generative(
            model, tokenizer, train, public, validation, max_length=config.max_length, max_new_tokens=max_new_tokens)
        zero_shot = evaluate_generation(model, evaluation, tokenizer) if evaluation is not None else None
        objective = GenerativeObjective(evaluation=evaluation, tokenizer=tokenizer,
                                        freeze_shared_experts=freeze_shared_experts)
        return Encoded(train_rec, public_rec, dev_rec, objective=objective, results={"zero_shot": zero_shot})

    data = {"private_records": len(train), "public_records": len(public),
            "dev_records": len(validation) if validation is not None else 0,
            "public_rule": source.describe(), "public_source": source.to_dict(), "task_type": "generate"}
    return Job(train, public, validation, source, (),
                {"objective": "generate", "freeze_shared_experts": freeze_shared_experts},
                {"data": data, "freeze_shared_experts": freeze_shared_experts}, encode)


def is_named(validation) -> bool:
    """Whether ``validation`` is ``{name: rows}`` (several splits) rather than one split's rows."""
    return isinstance(validation, Mapping) and all(isinstance(k, str) for k in validation) and \
        all(isinstance(v, (ClassificationData, list, tuple)) or hasattr(v, "column_names") for v in validation.values())
