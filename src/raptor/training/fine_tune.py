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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from torch import nn

from raptor.data import ClassificationData
from raptor.data.loaders import from_records, public_split, to_records
from raptor.data.public import PublicPrivateSplit
from raptor.data.public_source import PublicSource, resolve_public_source
from raptor.errors import BudgetExceededError, ConfigError
from raptor.training.build import build_trainer
from raptor.training.config import TrainConfig, with_batch_size
from raptor.training.methods import METHOD_SPECS
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
              metrics: Sequence[str] | None = None, task_type: str = "auto",
              resume: str | None = None, progress: bool = True, checkpoint_every: int = 0,
              checkpoint_start: bool = False, public_source: PublicSource | None = None,
              model_name: str | None = None, comm=None) -> FineTuneResult:
    """Fine-tune ``model`` (a loaded HF MoE classifier of a supported family) with ``config.method``.

    ``config`` defaults to ``TrainConfig()`` (RAPTOR, epsilon 8, secure randomness). Checkpoints
    (``config.output_path / "checkpoint"``, every ``checkpoint_every`` steps and, with
    ``checkpoint_start``, before the first update) hold everything needed to continue the same
    run: the weights that are not in the base checkpoint ``model_name`` (a ``save_pretrained``
    directory; a tiny family or ``None``: all weights), the tokenizer, the plan and public
    statistics, the ledger, the optimizers and the generator states, and a fingerprint of the
    config and data. ``resume`` continues such a checkpoint: a changed config or data set is a
    :class:`ConfigError` listing what changed, and the run's initial weights and tokenizer are
    taken from the checkpoint (nothing is redrawn). ``public_source``: the source ``public`` came
    from when the caller already separated it from ``train`` (``raptor train``); ``public`` is
    then used as is (possibly empty, for kind ``none``). A step that would exceed the budget saves
    a checkpoint (when checkpointing is on) and raises :class:`~raptor.errors.BudgetExceededError`
    whose ``partial`` attribute is the :class:`FineTuneResult` so far. ``comm``: a torchrun job's
    communicator (:func:`raptor.training.distributed.init_communicator`; default one process).
    Returns a :class:`FineTuneResult`.
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

    spec = METHOD_SPECS[config.method]
    if public_source is None:
        if public is not None and public_size is not None:
            raise ConfigError("give either public= records or public_size=, not both")
        public_source = resolve_public_source(
            public_file="(public= records)" if public is not None else None, public_size=public_size,
            user_data=True, nonprivate=config.method == "nonprivate", needs=public_needs(config, spec))
        public_data = None if public is None else rows(public, "public")
        split = public_split(private, public_source, public=public_data)
    else:
        if public is None:
            raise ConfigError(f"public_source={public_source.kind} needs the public records it designated (public=)")
        split = PublicPrivateSplit(public=rows(public, "public"), private=private, public_indices=None,
                                   private_indices=tuple(range(len(private))), rule=public_source.describe())
    check_labelled(public_source.labelled, config, spec)
    named = {} if validation is None else dict(validation) if _is_named(validation) else {"dev": validation}
    devs = {name: rows(data, f"validation {name}") for name, data in named.items()}
    config = with_batch_size(config, len(split.private))  # None: N/10, as raptor train
    if config.batch_size >= len(split.private):
        raise ConfigError(f"--batch-size {config.batch_size} must be below the {len(split.private)} private records")
    from raptor.training.run_checks import fingerprint
    from raptor.training.run_start import base_weights, continue_run, start_run

    fp = fingerprint(config.to_dict(), model=model_name or type(model).__name__, train=split.private,
                     public=split.public, validation=devs, label_names=private.label_names,
                     public_source=public_source.to_dict())
    # same run? then its own initial weights and tokenizer: nothing is redrawn or retrained
    start = start_run(model, tokenizer, fingerprint=fp, resume=resume, base=base_weights(model_name))
    model, tokenizer = start.model, start.tokenizer
    records = {name: to_records(tokenizer, data, config.max_length)
               for name, data in (("train", split.private), ("public", split.public))}
    dev_records = {name: to_records(tokenizer, data, config.max_length) for name, data in devs.items()}
    evaluator = Evaluator(dev_records, task_type=kind, metrics=metrics,
                          batch_size=config.performance.eval_batch_size, device=config.performance.device) \
        if dev_records else None
    trainer = build_trainer(config, model, train=records["train"], validation=next(iter(dev_records.values()), None),
                            public=records["public"], evaluator=evaluator, comm=comm)
    continue_run(trainer, start)
    data = {"private_records": len(split.private), "public_records": len(split.public),
            "public_rule": split.rule, "public_source": public_source.to_dict(),
            "dev_records": len(next(iter(devs.values()), ())),
            "dev_sets": {name: len(d) for name, d in devs.items()}, "task_type": kind}
    label_map = {str(i): name for i, name in enumerate(private.label_names)}
    try:
        results = trainer.fit(progress=progress, checkpoint_every=checkpoint_every, checkpoint_start=checkpoint_start)
    except BudgetExceededError as err:
        err.results.update(data=data, label_map=label_map, stopped_by_budget=str(err))
        err.partial = FineTuneResult(model=trainer.model, trainer=trainer, results=err.results, tokenizer=tokenizer)
        raise
    results.update(data=data, label_map=label_map)
    return FineTuneResult(model=trainer.model, trainer=trainer, results=results, tokenizer=tokenizer)


def _is_named(validation) -> bool:
    """Whether ``validation`` is ``{name: rows}`` (several splits) rather than one split's rows."""
    return isinstance(validation, Mapping) and all(isinstance(k, str) for k in validation) and \
        all(isinstance(v, (ClassificationData, list, tuple)) or hasattr(v, "column_names") for v in validation.values())
