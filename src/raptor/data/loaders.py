"""Data loading as a library: what ``raptor train``, ``raptor inspect``, the experiments and
:func:`raptor.fine_tune` call.

* :class:`DataSource`: where the splits come from (a GLUE TSV directory, the user's files, or the
  bundled SST-2 sample) and what is public (``public_file``, or a ``public_size`` slice of the
  training split; public data is only what the caller declared public).
* :func:`load_data` -> :class:`LoadedData`: (description, public/private split, validation).
* :func:`from_records`: a list of dicts or a ``datasets.Dataset`` -> :class:`ClassificationData`.
* :func:`to_records`: tokenized tensors padded to a fixed, public length.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

from raptor.data.collate import collate, encode
from raptor.data.dataset import ClassificationData, DataSplits
from raptor.data.glue_local import load_glue_dir
from raptor.data.public import PublicPrivateSplit, separate_public, split_public_private
from raptor.data.sample import load_bundled_sst2
from raptor.data.user_files import DEFAULT_TEXT_COLUMNS, load_user_files
from raptor.errors import ConfigError, DataError

#: default public slice of the training split (``--public-size``)
DEFAULT_PUBLIC_SIZE: float = 0.05


@dataclass(frozen=True)
class DataSource:
    """Where a run's data comes from (flags of ``raptor train`` / ``raptor inspect``)."""

    task: str | None = None
    data_dir: str | None = None
    train_file: str | None = None
    validation_file: str | None = None
    text_columns: tuple[str, ...] | None = None
    label_column: str = "label"
    public_file: str | None = None
    public_size: float = DEFAULT_PUBLIC_SIZE
    max_train_samples: int | None = None
    max_eval_samples: int | None = None

    def __post_init__(self) -> None:
        if self.train_file and self.task and self.data_dir:
            raise ConfigError("give either --task/--data-dir or --train-file, not both")
        if not self.train_file and bool(self.task) != bool(self.data_dir):
            raise ConfigError("--task needs --data-dir (a GLUE directory in the official TSV layout) and vice versa")
        if self.text_columns is not None:
            object.__setattr__(self, "text_columns", tuple(self.text_columns))


@dataclass(frozen=True)
class LoadedData:
    """The loaded splits: a description of the source, the public/private split, the private
    records used (``split.private`` capped at ``max_train_samples``), the validation split."""

    source: str
    split: PublicPrivateSplit
    private: ClassificationData
    validation: ClassificationData | None

    @property
    def public(self) -> ClassificationData:
        return self.split.public


def load_splits(source: DataSource) -> tuple[DataSplits, str]:
    """(train/validation splits, a description) from the user's files, a GLUE directory or the bundled sample."""
    if source.train_file:
        return load_user_files(source.train_file, source.validation_file, text_columns=source.text_columns,
                               label_column=source.label_column, task=source.task), f"files {source.train_file}"
    if source.task:
        return load_glue_dir(source.data_dir, source.task), f"{source.task} from {source.data_dir}"
    return load_bundled_sst2(), "sst2 (bundled sample)"


def subset(data: ClassificationData, n: int | None) -> ClassificationData:
    """The first ``n`` records (all with None)."""
    return data if n is None else data.subset(range(min(n, len(data))))


def public_split(train: ClassificationData, *, public: ClassificationData | None = None,
                 public_size: float | None = None) -> PublicPrivateSplit:
    """The public corpus: ``public`` as given (all of ``train`` stays private), or a deterministic
    ``public_size`` slice of ``train`` (a fraction < 1 or a count), removed from the private set.
    Exactly one must be given: public data is never a silent default."""
    if (public is None) == (public_size is None):
        raise ConfigError("declare the public corpus: give public records (--public-file) or a public slice "
                          "size of the training split (--public-size), exactly one")
    if public is not None:
        return separate_public(public, train)
    size = int(public_size) if public_size >= 1 else float(public_size)
    return split_public_private(train, public_size=size, seed=0)


def load_data(source: DataSource) -> LoadedData:
    """Load the splits of ``source``, separate the public corpus and cap the sample counts."""
    splits, desc = load_splits(source)
    public = None
    if source.public_file:
        public = load_user_files(source.public_file, text_columns=source.text_columns,
                                 label_column=source.label_column, task=source.task,
                                 label_names=splits.train.label_names).train
    split = public_split(splits.train, public=public, public_size=None if public is not None else source.public_size)
    validation = subset(splits.validation, source.max_eval_samples) if splits.validation is not None else None
    return LoadedData(desc, split, subset(split.private, source.max_train_samples), validation)


def from_records(rows: Iterable[Mapping], *, text_columns: Sequence[str] | None = None, label_column: str = "label",
                 label_names: Sequence[str] | None = None, source: str = "records") -> ClassificationData:
    """A list of dicts (or a ``datasets.Dataset``, or a :class:`ClassificationData`, returned as is)
    as :class:`ClassificationData`. Text columns default as for files (``sentence1``/``sentence2``,
    ``sentence``, ``text``); labels are ids (with ``label_names``, or ``"0".."K-1"``) or strings."""
    if isinstance(rows, ClassificationData):
        return rows
    rows = list(rows)
    if not rows:
        raise DataError(f"{source}: no records")
    columns = tuple(text_columns) if text_columns else next(
        (c for c in DEFAULT_TEXT_COLUMNS if all(k in rows[0] for k in c)), None)
    if columns is None:
        raise DataError(f"{source}: no text column among {list(rows[0])}; pass text_columns")
    missing = next((i for i, r in enumerate(rows) if label_column not in r or any(c not in r for c in columns)), None)
    if missing is not None:
        raise DataError(f"{source}: record {missing} lacks {label_column!r} or one of the text columns {columns}")
    raw = [r[label_column] for r in rows]
    if label_names is None:
        if all(isinstance(y, int) and not isinstance(y, bool) for y in raw):
            label_names = [str(i) for i in range(max(max(raw) + 1, 2))]
        else:
            label_names = sorted({str(y) for y in raw})
    names = tuple(str(n) for n in label_names)
    index = {n: i for i, n in enumerate(names)}
    labels = tuple(y if isinstance(y, int) and not isinstance(y, bool) else index.get(str(y), -1) for y in raw)
    return ClassificationData(tuple(str(r[columns[0]]) for r in rows), labels, names,
                              tuple(str(r[columns[1]]) for r in rows) if len(columns) == 2 else None, source=source)


def to_records(tokenizer, data: ClassificationData, max_length: int) -> dict[str, torch.Tensor]:
    """All records of ``data`` as tensors padded to ``max_length`` (a fixed, public shape: padding to
    the longest private record would reveal its length)."""
    enc = encode(tokenizer, data, max_length=max_length)
    batch = collate(enc, range(len(enc)))
    pad = max_length - batch["input_ids"].shape[1]
    if pad > 0:
        batch["input_ids"] = torch.nn.functional.pad(batch["input_ids"], (0, pad), value=enc.pad_token_id)
        batch["attention_mask"] = torch.nn.functional.pad(batch["attention_mask"], (0, pad), value=0)
    return batch
