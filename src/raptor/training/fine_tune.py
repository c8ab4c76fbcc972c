"""``raptor.fine_tune``: DP fine-tuning of a model the caller already loaded.

    result = raptor.fine_tune(model, tokenizer, train, validation, config, public=public)

``train`` / ``validation`` / ``public``: lists of dicts (``{"sentence": ..., "label": ...}``), a
``datasets.Dataset`` or :class:`raptor.data.ClassificationData`. The public corpus must be
declared: ``public=`` records, or ``public_size=`` (a slice of ``train``, removed from the private
records). ``raptor train`` calls this same function.
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
              resume: str | None = None, progress: bool = True, checkpoint_every: int = 0) -> FineTuneResult:
    """Fine-tune ``model`` (a loaded HF MoE classifier of a supported family) with ``config.method``.

    ``config`` defaults to ``TrainConfig()`` (RAPTOR, epsilon 8, secure randomness). ``resume``
    continues a checkpoint of the same run and ledger. Returns a :class:`FineTuneResult`.
    """
    config = config or TrainConfig()
    private = from_records(train, text_columns=text_columns, label_column=label_column, source="train")
    names = private.label_names
    public_data = None if public is None else from_records(public, text_columns=text_columns,
                                                           label_column=label_column, label_names=names,
                                                           source="public")
    split = public_split(private, public=public_data, public_size=public_size)
    dev = None if validation is None else from_records(validation, text_columns=text_columns,
                                                        label_column=label_column, label_names=names,
                                                        source="validation")
    if config.batch_size >= len(split.private):
        raise ConfigError(f"--batch-size {config.batch_size} must be below the {len(split.private)} private records")
    records = {name: to_records(tokenizer, data, config.max_length)
               for name, data in (("train", split.private), ("public", split.public), ("validation", dev))
               if data is not None}
    trainer = build_trainer(config, model, train=records["train"], validation=records.get("validation"),
                            public=records["public"])
    if resume:
        from raptor.accounting.ledger import PrivacyLedger

        trainer.resume(resume, PrivacyLedger.from_dict)
    results = trainer.fit(progress=progress, checkpoint_every=checkpoint_every)
    results["data"] = {"private_records": len(split.private), "public_records": len(split.public),
                       "public_rule": split.rule, "dev_records": len(dev) if dev is not None else 0}
    return FineTuneResult(model=trainer.model, trainer=trainer, results=results)
