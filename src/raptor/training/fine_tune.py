"""``raptor.fine_tune``: DP fine-tuning of a model the caller already loaded.

    result = raptor.fine_tune(model, tokenizer, train, validation, config, public=public)

``train`` / ``validation`` / ``public``: lists of dicts (``{"sentence": ..., "label": ...}``), a
``datasets.Dataset`` or :class:`raptor.data.ClassificationData`. The public corpus must be
declared: ``public=`` records, or ``public_size=`` (a slice of ``train``, removed from the private
records). ``raptor train`` calls this same function.

``validation`` may also be ``{name: rows}`` for several validation splits (MNLI: ``matched``,
``mismatched``); ``metrics`` names the task's metrics, main first (default: accuracy, or Pearson
and Spearman for float labels; see :mod:`raptor.evaluation.metrics`). Float labels (inferred,
or ``task_type="regression"``) train a one-output head with squared-error loss; the model must
have been built with ``num_labels=1``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from torch import nn

from raptor.data import ClassificationData
from raptor.data.loaders import from_records, public_split, to_records
from raptor.errors import ConfigError
from raptor.training.build import build_trainer
from raptor.training.config import TrainConfig
from raptor.training.trainer import Trainer

Rows = Iterable[Mapping] | ClassificationData


@dataclass(frozen=True)
class FineTuneResult:
    """The trained model, the trainer (ledger, plan, checkpoints) and results.json's content."""

    model: nn.Module
    trainer: Trainer
    results: dict


def fine_tune(model: nn.Module, tokenizer, train: Rows, validation: Rows | None = None,
              config: TrainConfig | None = None, *, public: Rows | None = None, public_size: float | None = None,
              text_columns: Sequence[str] | None = None, label_column: str = "label",
              metrics: Sequence[str] | None = None, task_type: str = "auto",
              resume: str | None = None, progress: bool = True, checkpoint_every: int = 0,
              comm=None) -> FineTuneResult:
    """Fine-tune ``model`` (a loaded HF MoE classifier of a supported family) with ``config.method``.

    ``config`` defaults to ``TrainConfig()`` (RAPTOR, epsilon 8, secure randomness). ``resume``
    continues a checkpoint of the same run and ledger. ``comm``: a torchrun job's communicator
    (:func:`raptor.training.distributed.init_communicator`; default one process). Returns a
    :class:`FineTuneResult`.
    """
    config = config or TrainConfig()
    from raptor.training.evaluator import Evaluator
    from raptor.training.objectives import task_type_of

    private = from_records(train, text_columns=text_columns, label_column=label_column, source="train",
                           task_type=task_type)
    kind = private.task_type
    if task_type_of(model) != kind:
        raise ConfigError(f"the training labels make this a {kind} task but the model has a {task_type_of(model)} "
                          f"head; build it with num_labels={private.num_labels}")

    def rows(data, source):
        return from_records(data, text_columns=text_columns, label_column=label_column, source=source,
                            label_names=private.label_names if kind == "classification" else None, task_type=kind)

    public_data = None if public is None else rows(public, "public")
    split = public_split(private, public=public_data, public_size=public_size)
    named = {} if validation is None else dict(validation) if _is_named(validation) else {"dev": validation}
    devs = {name: rows(data, f"validation {name}") for name, data in named.items()}
    if config.batch_size >= len(split.private):
        raise ConfigError(f"--batch-size {config.batch_size} must be below the {len(split.private)} private records")
    records = {name: to_records(tokenizer, data, config.max_length)
               for name, data in (("train", split.private), ("public", split.public))}
    dev_records = {name: to_records(tokenizer, data, config.max_length) for name, data in devs.items()}
    evaluator = Evaluator(dev_records, task_type=kind, metrics=metrics,
                          batch_size=config.performance.eval_batch_size, device=config.performance.device) \
        if dev_records else None
    trainer = build_trainer(config, model, train=records["train"], validation=next(iter(dev_records.values()), None),
                            public=records["public"], evaluator=evaluator, comm=comm)
    if resume:
        from raptor.accounting.ledger import PrivacyLedger

        trainer.resume(resume, PrivacyLedger.from_dict)
    results = trainer.fit(progress=progress, checkpoint_every=checkpoint_every)
    results["data"] = {"private_records": len(split.private), "public_records": len(split.public),
                       "public_rule": split.rule, "dev_records": len(next(iter(devs.values()), ())),
                       "dev_sets": {name: len(d) for name, d in devs.items()}, "task_type": kind}
    return FineTuneResult(model=trainer.model, trainer=trainer, results=results)


def _is_named(validation) -> bool:
    """Whether ``validation`` is ``{name: rows}`` (several splits) rather than one split's rows."""
    return isinstance(validation, Mapping) and all(isinstance(k, str) for k in validation) and \
        all(isinstance(v, (ClassificationData, list, tuple)) or hasattr(v, "column_names") for v in validation.values())
