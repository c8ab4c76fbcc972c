"""Data loading as a library: what ``raptor train``, ``raptor inspect``, the experiments and
:func:`raptor.fine_tune` call.

* :class:`DataSource`: where the splits come from (a GLUE TSV directory, the local Hugging Face
  datasets cache for a task named without a directory, the user's files, or the bundled SST-2
  sample) and what is public: only what the caller declared (:mod:`raptor.data.public_source`:
  ``public_file``, a ``public_size`` slice, the model's public corpus, the GLUE convention for
  benchmarks); a user's training file is never sliced by default.
* :func:`load_data` -> :class:`LoadedData`: (description, public/private split, validation
  split(s), task type, the task's metrics).
* :func:`from_records`: a list of dicts or a ``datasets.Dataset`` -> :class:`ClassificationData`.
* :func:`to_records`: tokenized tensors padded to a fixed, public length.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

from raptor.data.batching import collate, encode
from raptor.data.dataset import ClassificationData, DataSplits
from raptor.data.glue_local import load_glue_dir
from raptor.data.labels import label_ids, plain
from raptor.data.public import PublicPrivateSplit, separate_public, split_public_private
from raptor.data.public_source import PublicSource, resolve_public_source
from raptor.data.sample import load_bundled_sst2
from raptor.data.user_files import DEFAULT_TEXT_COLUMNS, TASK_TYPES, infer_task_type, load_user_files
from raptor.errors import ConfigError, DataError


@dataclass(frozen=True)
class DataSource:
    """Where a run's data comes from (flags of ``raptor train`` / ``raptor inspect``).

    Public side (:func:`raptor.data.public_source.resolve_public_source`): ``public_file``, or a
    ``public_size`` slice given on purpose, or the public corpus of ``model`` (a directory or a
    shipped name), or for GLUE / the bundled sample the benchmark convention. ``nonprivate``: the
    run makes no privacy claim (its training data may serve as the public side); ``needs_public``:
    what the run computes from public data (empty: a DP run may go without public data).
    """

    task: str | None = None
    data_dir: str | None = None
    train_file: str | None = None
    validation_file: str | None = None
    text_columns: tuple[str, ...] | None = None
    label_column: str = "label"
    public_file: str | None = None
    public_size: float | None = None
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    hf_cache: str | None = None
    task_type: str = "auto"
    model: str | None = None
    nonprivate: bool = False
    needs_public: tuple[str, ...] = ("public routing statistics",)

    def __post_init__(self) -> None:
        if self.train_file and self.task and self.data_dir:
            raise ConfigError("give either --task/--data-dir or --train-file, not both")
        if not self.train_file and self.data_dir and not self.task:
            raise ConfigError("--data-dir needs --task (sst2, mrpc, rte, cola, stsb, wnli, qnli, qqp, mnli)")
        if self.task_type not in TASK_TYPES:
            raise ConfigError(f"data.task_type must be one of {', '.join(TASK_TYPES)}, got {self.task_type!r}")
        if self.task_type != "auto" and not self.train_file:
            raise ConfigError("data.task_type applies to --train-file; a GLUE --task has its own type (stsb: regression)")
        if self.text_columns is not None:
            object.__setattr__(self, "text_columns", tuple(self.text_columns))
        object.__setattr__(self, "needs_public", tuple(self.needs_public))

    def public_source(self) -> PublicSource:
        """The declared public source (a :class:`ConfigError` naming the flags when none is)."""
        return resolve_public_source(public_file=self.public_file, public_size=self.public_size, model=self.model,
                                     user_data=bool(self.train_file), nonprivate=self.nonprivate,
                                     needs=self.needs_public)


@dataclass(frozen=True)
class LoadedData:
    """The loaded splits: a description of the source, the public/private split, the private
    records used (``split.private`` capped at ``max_train_samples``), the validation split(s)
    (``validation_sets``: name -> split, the main one first; MNLI: ``matched``, ``mismatched``),
    each capped at ``max_eval_samples``, and the task's metric names (main first)."""

    source: str
    split: PublicPrivateSplit
    private: ClassificationData
    validation_sets: dict[str, ClassificationData]
    metrics: tuple[str, ...]
    public_source: PublicSource | None = None

    @property
    def public(self) -> ClassificationData:
        return self.split.public

    @property
    def validation(self) -> ClassificationData | None:
        """The main validation split (``None`` without one)."""
        return next(iter(self.validation_sets.values()), None)

    @property
    def task_type(self) -> str:
        return self.private.task_type


def _warn_if_validation_is_training(train_file, validation_file) -> None:
    """A :class:`DataWarning` when ``--validation-file`` is the training file (the same path, or the same
    bytes): its accuracy then measures memorisation of private records, not generalisation. Shown to
    the operator, who holds both files; nothing of it goes into results.json."""
    import os
    import warnings

    from raptor._hashing import sha256_file
    from raptor.errors import DataWarning

    if not validation_file:
        return
    try:
        same = os.path.samefile(train_file, validation_file) or sha256_file(train_file) == sha256_file(validation_file)
    except OSError:  # a missing file is refused by the loader, with its own message
        return
    if same:
        warnings.warn(DataWarning(f"--validation-file {validation_file} holds the same records as --train-file: its "
                                  "accuracy measures memorisation of the private records, not generalisation; give "
                                  "a held-out file"), stacklevel=3)


def load_splits(source: DataSource) -> tuple[DataSplits, str]:
    """(train/validation splits, a description) from the user's files, a GLUE directory or the bundled sample."""
    if source.train_file:
        _warn_if_validation_is_training(source.train_file, source.validation_file)
        return load_user_files(source.train_file, source.validation_file, text_columns=source.text_columns,
                               label_column=source.label_column, task=source.task,
                               task_type=source.task_type), f"files {source.train_file}"
    if source.task and source.data_dir:
        return load_glue_dir(source.data_dir, source.task), f"{source.task} from {source.data_dir}"
    if source.task:
        from raptor.data.hub import load_glue_cache

        return load_glue_cache(source.task, cache_dir=source.hf_cache), f"{source.task} from the Hugging Face cache"
    return load_bundled_sst2(), "sst2 (bundled sample)"


def subset(data: ClassificationData, n: int | None) -> ClassificationData:
    """The first ``n`` records (all with None)."""
    return data if n is None else data.subset(range(min(n, len(data))))


def public_split(train: ClassificationData, source: PublicSource, *,
                 public: ClassificationData | None = None) -> PublicPrivateSplit:
    """The public corpus of a declared ``source``: ``public`` records as given for a file or a
    model corpus (all of ``train`` stays private); a deterministic slice of ``train`` (removed from
    the private set) for ``slice`` and ``glue-convention``; all of ``train`` for ``training-data``
    (a non-private run); no records for ``none``."""
    if source.kind in ("file", "model-corpus"):
        if public is None:
            raise ConfigError(f"public source {source.kind} {source.path}: no public records were loaded")
        return separate_public(public, train)
    if public is not None:
        raise ConfigError(f"public records were given but the public source is {source.kind}")
    n = len(train)
    if source.kind == "training-data":
        return PublicPrivateSplit(public=train, private=train, public_indices=None, private_indices=tuple(range(n)),
                                  rule=f"public = the {n} training records (non-private run: no privacy claim)")
    if source.kind == "none":
        return PublicPrivateSplit(public=train.subset((), source="no public data"), private=train,
                                  public_indices=None, private_indices=tuple(range(n)),
                                  rule="public = none (the method computes nothing from public data); "
                                       "private = all train records")
    return split_public_private(train, public_size=source.size, seed=0)


def load_public_file(path: str, splits: DataSplits, source: DataSource) -> ClassificationData:
    """A declared public corpus file (``--public-file`` or the model's): a table with the task's
    columns, or a ``.txt`` of unlabelled texts (one per line); the one reader,
    :func:`raptor.data.model_corpus.read_public_corpus`."""
    from raptor.data.model_corpus import read_public_corpus

    return read_public_corpus(path, splits.train, text_columns=source.text_columns, label_column=source.label_column,
                              task=source.task)


def warn_public_side(source: DataSource, declared: PublicSource, split: PublicPrivateSplit) -> None:
    """A :class:`DataWarning` when private records become public: a ``--public-size`` slice of the
    user's file (on purpose, but it should be said), or a public file that repeats train records
    (they are then used without privacy). Privacy: the overlap count is printed to the user who
    owns both files; it is not saved."""
    import warnings

    from raptor.errors import DataWarning

    if declared.kind == "slice" and source.train_file:
        warnings.warn(DataWarning(
            f"--public-size {source.public_size:g}: {len(split.public)} records of {source.train_file} are public and "
            "lose DP protection (they are used without privacy)"), stacklevel=3)
    if declared.kind == "file" and len(split.public):
        def key(data, i):
            return (data.texts[i], None if data.text_pairs is None else data.text_pairs[i])

        public_keys = {key(split.public, i) for i in range(len(split.public))}
        shared = sum(key(split.private, i) in public_keys for i in range(len(split.private)))
        if shared:
            warnings.warn(DataWarning(
                f"{declared.path}: {shared} of the {len(split.private)} --train-file records are also in the "
                "--public-file; those texts are used without privacy. Remove them from one of the files"),
                stacklevel=3)


def load_data(source: DataSource) -> LoadedData:
    """Load the splits of ``source``, separate the declared public corpus and cap the sample counts."""
    declared = source.public_source()
    splits, desc = load_splits(source)
    public = load_public_file(declared.path, splits, source) if declared.kind in ("file", "model-corpus") else None
    train = subset(splits.train, source.max_train_samples) if declared.kind == "training-data" else splits.train
    split = public_split(train, declared, public=public)
    warn_public_side(source, declared, split)
    sets = {name: subset(data, source.max_eval_samples) for name, data in splits.validation_sets().items()}
    return LoadedData(desc, split, subset(split.private, source.max_train_samples), sets, splits.metric_names,
                      declared)


def from_records(rows: Iterable[Mapping], *, text_columns: Sequence[str] | None = None, label_column: str = "label",
                 label_names: Sequence[str] | None = None, source: str = "records",
                 task_type: str = "auto") -> ClassificationData:
    """A list of dicts (or a ``datasets.Dataset``, or a :class:`ClassificationData`, returned as is)
    as :class:`ClassificationData`. Text columns default as for files (``sentence1``/``sentence2``,
    ``sentence``, ``text``); labels are ids (with ``label_names``, or ``"0".."K-1"``) or strings;
    or float scores for ``task_type="regression"`` (``"auto"``: inferred from numeric labels as for
    files, :func:`raptor.data.user_files.infer_task_type`; never with ``label_names``)."""
    if isinstance(rows, ClassificationData):
        return rows
    rows = list(rows)
    if not rows:
        raise DataError(f"{source}: no records")
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, Mapping)), None)
    if bad is not None:
        raise DataError(f"{source}: record {bad} is a {type(rows[bad]).__name__}, not a mapping of column -> value; "
                        "give records such as {'sentence': ..., 'label': ...}")
    columns = tuple(text_columns) if text_columns else next(
        (c for c in DEFAULT_TEXT_COLUMNS if all(k in rows[0] for k in c)), None)
    if columns is None and {"prompt", "answer"} <= set(rows[0]):
        raise DataError(f"{source}: the records hold prompt/answer pairs, which are generation records; give "
                        "raptor.data.qa.QAData(prompts=..., answers=...) to fine-tune on the answers (text "
                        "classification records hold a text column and a label)")
    if columns is None:
        raise DataError(f"{source}: no text column among {list(rows[0])}; pass text_columns")
    missing = next((i for i, r in enumerate(rows) if label_column not in r or any(c not in r for c in columns)), None)
    if missing is not None:
        lacks = [c for c in (label_column, *columns) if c not in rows[missing]]
        what = "label" if lacks[0] == label_column else "text"
        raise DataError(f"{source}: record {missing} lacks {lacks[0]!r} (its keys: {sorted(map(str, rows[missing]))}); "
                        f"give every record its {what}, or name the column ({what}_column"
                        f"{'s' if what == 'text' else ''}=)")
    empty = next(((i, c) for i, r in enumerate(rows) for c in (*columns, label_column) if r[c] is None), None)
    if empty is not None:  # str(None) would train on the text "None", or make "None" a class
        raise DataError(f"{source}: record {empty[0]}: {empty[1]!r} is None (a missing value); drop the record or "
                        "fill it in")
    raw = [plain(r[label_column]) for r in rows]
    texts = tuple(str(r[columns[0]]) for r in rows)
    pairs = tuple(str(r[columns[1]]) for r in rows) if len(columns) == 2 else None
    numeric = all(isinstance(y, (int, float)) and not isinstance(y, bool) for y in raw)
    if task_type == "auto":
        if label_names is None and numeric:
            _refuse_ambiguous(raw, source)
        task_type = "regression" if label_names is None and numeric and \
            infer_task_type([str(y) for y in raw]) == "regression" else "classification"
    if task_type == "regression":
        bad = next((i for i, y in enumerate(raw) if isinstance(y, bool) or not isinstance(y, (int, float))), None)
        if bad is not None:
            raise DataError(f"{source}: record {bad}: label {raw[bad]!r} is not a number; a regression task needs one")
        bad = next((i for i, y in enumerate(raw) if not math.isfinite(y)), None)
        if bad is not None:
            raise DataError(f"{source}: record {bad}: label {raw[bad]!r} is not a finite number; fix or drop the record")
        return ClassificationData(texts, tuple(float(y) for y in raw), (), pairs, source=source,
                                  task_type="regression")
    names, labels = label_ids(raw, source=source, label_names=label_names)  # one type, no NaN class
    return ClassificationData(texts, labels, names, pairs, source=source)


def _refuse_ambiguous(raw, source: str) -> None:
    """Numeric labels of which a few (at most :data:`AMBIGUOUS_FRACTIONAL_SHARE`) are fractional: a typo
    such as ``0.5`` among 0/1 classes would silently make the task a regression (as for files)."""
    from raptor.data.user_files import AMBIGUOUS_FRACTIONAL_SHARE

    fractional = [i for i, y in enumerate(raw) if math.isfinite(y) and not float(y).is_integer()]
    if fractional and len(fractional) <= AMBIGUOUS_FRACTIONAL_SHARE * len(raw):
        i = fractional[0]
        raise DataError(f"{source}: record {i}: label {raw[i]!r} is fractional while {len(raw) - len(fractional)} of "
                        f"the {len(raw)} labels are whole numbers; fix the label if it is a typo, or pass "
                        "task_type='regression' (scores) or task_type='classification' (class names)")


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
