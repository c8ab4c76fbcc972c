"""Loading the user's own CSV, TSV or JSON Lines files, in the style of Hugging Face ``run_glue.py``.

Options (as on the command line): ``--train-file``, ``--validation-file``, ``--text-column`` (one
column, or two for sentence pairs) and ``--label-column`` (default ``label``). The files need a
header (JSON Lines: the keys of each object). The format comes from the suffix: ``.csv``, ``.tsv``,
``.jsonl`` / ``.json`` (one object per line), optionally ``.gz``.

Task type (``--task-type``: ``auto``, ``classification`` or ``regression``)
- ``regression``: every label must be a finite number (a float score, like STS-B's); a row whose
  label is not a number is an error naming the file and the line. The head has one output.
- ``auto`` (default): regression when every train label is a number and the column looks like a
  score rather than a class id: some value is not a whole number (``3.8``), or there are more than
  :data:`REGRESSION_MIN_DISTINCT` distinct values; classification otherwise (``0``/``1``,
  ``1.0``/``2.0``, star ratings 1-5, strings). With a ``task``, the task decides (STS-B is
  regression); with ``label_names``, classification.

Labels (classification)
- Values may be strings or integers. Surrounding whitespace of a CSV/TSV label cell is ignored.
- Without a task, the label set is the set of values in the **train** file, sorted (numerically
  when every value is an integer, else as strings), like ``run_glue.py``; label id ``i`` is the
  ``i``-th value. Every validation label must be in that set: a class that is in the validation
  file but not in the train file is an error naming the file, the line and the class.
- With a ``task`` (a GLUE :class:`TaskSpec`), values must be the task's TSV labels or label names
  and map to the task's ids; a pair task must be given two text columns.

Privacy: the label *set* of the train file (and, with ``auto``, whether it is numeric with many
values) is read from the private file. It is the schema the user declares by providing the file
(as in every DP fine-tuning recipe); pass ``task=``, ``label_names=`` or ``task_type=`` to fix it
in advance instead.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from pathlib import Path

from raptor.data.dataset import ClassificationData, DataSplits
from raptor.data.tasks import TaskSpec, get_task, parse_score
from raptor.data.textio import Record, Table, read_table
from raptor.errors import DataError, DataWarning

#: ``task_type="auto"``: a numeric label column with more distinct values than this is a regression target
REGRESSION_MIN_DISTINCT = 20
TASK_TYPES = ("auto", "classification", "regression")

#: text columns used when none are given, checked in this order (a pair first).
DEFAULT_TEXT_COLUMNS: tuple[tuple[str, ...], ...] = (("sentence1", "sentence2"), ("sentence",), ("text",))


def _label_value(record: Record, column: str, where: str):
    if column not in record.fields:
        raise DataError(f"{where}: line {record.line}: missing label column {column!r}")
    value = record.fields[column]
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DataError(
            f"{where}: line {record.line}: label {value!r} in column {column!r} must be a string or a number"
        )
    if isinstance(value, str):
        value = value.strip()
        if value == "":
            raise DataError(f"{where}: line {record.line}: empty label in column {column!r}")
    try:
        finite = math.isfinite(float(value))
    except (ValueError, OverflowError):
        finite = True  # a class name such as "positive"
    if not finite:
        raise DataError(f"{where}: line {record.line}: label {value!r} in column {column!r} is not a number "
                        "(nan and infinite values are not finite labels); fix or drop the record")
    return value


def canonical_label(value: str) -> str:
    """A class label in canonical form: a whole number written ``1``, ``1.0``, ``+1`` or ``1e0`` is
    ``"1"`` (so ``1.0`` beside ``1`` is one class, not two); any other value is unchanged."""
    number = _as_number(value)
    return str(int(number)) if number is not None and number.is_integer() else value


def _text_value(record: Record, column: str, where: str) -> str:
    if column not in record.fields:
        raise DataError(f"{where}: line {record.line}: missing text column {column!r}")
    value = record.fields[column]
    if not isinstance(value, str):
        raise DataError(
            f"{where}: line {record.line}: text column {column!r} holds {type(value).__name__} "
            f"{value!r}; expected a string"
        )
    return value


def _sorted_labels(values: list[str]) -> list[str]:
    """The distinct label values, sorted numerically when all are integers, else as strings."""
    def as_int(v: str) -> int | None:
        digits = v[1:] if v[:1] in "+-" else v
        return int(v) if digits.isdigit() else None

    distinct = set(values)
    if all(as_int(v) is not None for v in distinct):
        return sorted(distinct, key=lambda v: (as_int(v), v))
    return sorted(distinct)


def _as_number(value: str) -> float | None:
    """``value`` as a finite float, or None; ``1_000`` is not a number here (Python's float() would
    merge it with ``1000``)."""
    if isinstance(value, str) and "_" in value:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def infer_task_type(values: Sequence[str]) -> str:
    """``"regression"`` when every value is a finite number and some value is not whole or there are
    more than :data:`REGRESSION_MIN_DISTINCT` distinct values; else ``"classification"``."""
    numbers = [_as_number(v) for v in values]
    if not numbers or any(x is None for x in numbers):
        return "classification"
    if any(not x.is_integer() for x in numbers) or len(set(numbers)) > REGRESSION_MIN_DISTINCT:
        return "regression"
    return "classification"


#: ``task_type="auto"``: numeric labels of which at most this share is fractional are ambiguous (a typo
#: such as ``0.5`` among 0/1 classes would silently turn classification into regression)
AMBIGUOUS_FRACTIONAL_SHARE = 0.1


def refuse_ambiguous_labels(table: Table, raw: Sequence[str], column: str) -> None:
    """:class:`DataError` naming the first fractional label when every label is a number, almost all
    are whole and a few are not: neither classification nor regression can be inferred safely."""
    numbers = [_as_number(v) for v in raw]
    if not numbers or any(x is None for x in numbers):
        return
    fractional = [i for i, x in enumerate(numbers) if not x.is_integer()]
    if fractional and len(fractional) <= AMBIGUOUS_FRACTIONAL_SHARE * len(numbers):
        i = fractional[0]
        raise DataError(
            f"{table.name}: line {table.records[i].line}: label {raw[i]!r} in column {column!r} is fractional while "
            f"{len(numbers) - len(fractional)} of the {len(numbers)} labels are whole numbers; fix the label if it "
            "is a typo, or pass data.task_type=regression (scores) or data.task_type=classification (class names)")


def warn_mixed_labels(table: Table, raw: Sequence[str], column: str) -> None:
    """One :class:`DataWarning` naming the first word label and its line when the label column mixes
    numbers and words (``maybe`` among 0/1): each word is a class of its own, usually a typo."""
    numeric = [_as_number(v) is not None for v in raw]
    if not any(numeric) or all(numeric):
        return
    i = numeric.index(False)
    words = sorted({v for v, n in zip(raw, numeric) if not n})
    warnings.warn(DataWarning(
        f"{table.name}: line {table.records[i].line}: label {raw[i]!r} in column {column!r} is a word among "
        f"{sum(numeric)} numeric labels; {len(words)} word label(s) ({', '.join(repr(w) for w in words[:5])}"
        f"{', ...' if len(words) > 5 else ''}) are taken as classes of their own: fix them if they are typos"),
        stacklevel=3)


def _scores(table: Table, raw: list[str], column: str) -> tuple[float, ...]:
    return tuple(parse_score(v, where=f"{table.name}: line {r.line}", column=column)
                 for r, v in zip(table.records, raw))


def _warn_empty(table: Table, texts, pairs, text_columns) -> None:
    """A :class:`DataWarning` counting the records whose text is empty or only spaces (kept: they
    are valid records, but usually a sign of a wrong column or a broken export)."""
    lines = [r.line for i, r in enumerate(table.records)
             if not texts[i].strip() or (pairs is not None and not pairs[i].strip())]
    if lines:
        shown = ", ".join(str(n) for n in lines[:5]) + (", ..." if len(lines) > 5 else "")
        warnings.warn(DataWarning(
            f"{table.name}: {len(lines)} of {len(texts)} records have an empty text in column(s) "
            f"{', '.join(repr(c) for c in text_columns)} (lines {shown}); they are kept as records"), stacklevel=3)


def _resolve_text_columns(table: Table, text_columns: Sequence[str] | None) -> tuple[str, ...]:
    if text_columns is None:
        for candidate in DEFAULT_TEXT_COLUMNS:
            if all(c in table.columns for c in candidate):
                return candidate
        raise DataError(
            f"{table.name}: no --text-column given and none of the default columns "
            f"{[list(c) for c in DEFAULT_TEXT_COLUMNS]} is in the header {list(table.columns)}; "
            f"pass --text-column NAME (or two names for sentence pairs)"
        )
    columns = tuple(text_columns)
    if len(columns) not in (1, 2):
        raise DataError(f"--text-column takes one or two column names, got {len(columns)}: {list(columns)}")
    return columns


def _extract(table: Table, text_columns, label_column) -> tuple[list[str], list[str] | None, list[str]]:
    table.require_columns(text_columns, role="text column")
    table.require_columns((label_column,), role="label column")
    texts = [_text_value(r, text_columns[0], table.name) for r in table.records]
    pairs = [_text_value(r, text_columns[1], table.name) for r in table.records] if len(text_columns) == 2 else None
    raw = [str(_label_value(r, label_column, table.name)) for r in table.records]
    return texts, pairs, raw


def _ids(table: Table, raw: list[str], mapping: dict[str, int], column: str, allowed: str,
         *, train_file: str | None = None) -> tuple[int, ...]:
    ids = []
    for record, value in zip(table.records, raw):
        if value not in mapping and train_file is not None:
            raise DataError(
                f"{table.name}: line {record.line}: class {value!r} (column {column!r}) is in the validation "
                f"file but not in the train file {train_file}, whose classes are {list(mapping)}; a classifier "
                f"cannot predict a class it never saw: fix the label, or pass data.task_type=regression if the "
                f"labels are scores"
            )
        if value not in mapping:
            raise DataError(
                f"{table.name}: line {record.line}: unknown label {value!r} in column {column!r}; "
                f"expected one of {allowed}"
            )
        ids.append(mapping[value])
    return tuple(ids)


def load_user_files(
    train_file: str | Path,
    validation_file: str | Path | None = None,
    *,
    text_columns: Sequence[str] | None = None,
    label_column: str = "label",
    task: str | TaskSpec | None = None,
    label_names: Sequence[str] | None = None,
    task_type: str = "auto",
) -> DataSplits:
    """Train (and validation) splits from the user's CSV / TSV / JSON Lines files.

    Args:
        train_file, validation_file: paths; the format comes from the suffix.
        text_columns: one column, or two for sentence pairs; default: ``sentence1, sentence2`` if
            present, else ``sentence``, else ``text``.
        label_column: the column holding labels.
        task: a GLUE task whose label set and pair-ness the files must follow.
        label_names: a fixed label set (strings, in id order) instead of the train file's.
        task_type: ``"auto"``, ``"classification"`` or ``"regression"`` (see the module docstring).
    """
    if task_type not in TASK_TYPES:
        raise DataError(f"data.task_type must be one of {', '.join(TASK_TYPES)}, got {task_type!r}")
    spec = get_task(task) if task is not None else None
    if spec is not None and task_type not in ("auto", spec.task_type):
        raise DataError(f"--task {spec.name} is a {spec.task_type} task; drop data.task_type={task_type}")
    if label_names is not None and task_type == "regression":
        raise DataError("label names were given for a regression task: regression labels are numbers")
    train_table = read_table(train_file)
    columns = _resolve_text_columns(train_table, text_columns)
    if spec is not None and spec.is_pair and len(columns) == 1:
        raise DataError(
            f"{train_file}: task {spec.name} takes sentence pairs but one --text-column ({columns[0]!r}) was "
            f"given; pass two, e.g. --text-column {' '.join(spec.hub_text_columns)}"
        )
    if spec is not None and not spec.is_pair and len(columns) == 2:
        raise DataError(f"{train_file}: task {spec.name} takes single sentences but two --text-column were given")

    texts, pairs, raw = _extract(train_table, columns, label_column)
    _warn_empty(train_table, texts, pairs, columns)
    if spec is not None:
        task_type = spec.task_type
    elif label_names is not None:
        task_type = "classification"
    elif task_type == "auto":
        refuse_ambiguous_labels(train_table, raw, label_column)
        task_type = infer_task_type(raw)
    metrics = spec.metrics if spec is not None else ()
    if task_type == "regression":
        return _regression_splits(train_table, texts, pairs, raw, columns, label_column, validation_file, metrics)
    raw = [canonical_label(v) for v in raw]
    if spec is None and label_names is None:
        warn_mixed_labels(train_table, raw, label_column)
    names, mapping, allowed = _label_set(spec, label_names, raw, train_file, label_column)
    train = ClassificationData(
        tuple(texts), _ids(train_table, raw, mapping, label_column, allowed), names,
        tuple(pairs) if pairs is not None else None, source=str(train_file),
    )
    validation = None
    if validation_file is not None:
        table = read_table(validation_file)
        vtexts, vpairs, vraw = _extract(table, columns, label_column)
        vraw = [canonical_label(v) for v in vraw]
        from_train = str(train_file) if spec is None and label_names is None else None
        validation = ClassificationData(
            tuple(vtexts), _ids(table, vraw, mapping, label_column, allowed, train_file=from_train), names,
            tuple(vpairs) if vpairs is not None else None, source=str(validation_file),
        )
    return DataSplits(train=train, validation=validation, metrics=metrics)


def _label_set(spec: TaskSpec | None, label_names, raw, train_file, label_column) -> tuple[tuple, dict, str]:
    """(label names in id order, value -> id, how the allowed labels are described in an error): the
    task's labels (TSV values or names), the given label names, or the train file's own values."""
    if spec is not None:
        names = spec.label_names
        mapping = {v: i for i, v in enumerate(spec.tsv_labels)} | {n: i for i, n in enumerate(spec.label_names)}
        return names, mapping, f"task {spec.name}'s labels {', '.join(repr(v) for v in spec.tsv_labels)} " \
            f"(or names {list(names)})"
    if label_names is not None:
        names = tuple(str(n) for n in label_names)
        return names, {n: i for i, n in enumerate(names)}, f"the given label names {list(names)}"
    values = _sorted_labels(raw)
    if len(values) < 2:
        raise DataError(
            f"{train_file}: column {label_column!r} has a single label value {values[0]!r}; "
            f"classification needs at least two labels in the train file"
        )
    names = tuple(str(v) for v in values)
    return names, {n: i for i, n in enumerate(names)}, f"the train file's labels {list(names)}"


def _regression_splits(train_table: Table, texts, pairs, raw, columns, label_column, validation_file,
                       metrics) -> DataSplits:
    train = ClassificationData(tuple(texts), _scores(train_table, raw, label_column), (),
                               tuple(pairs) if pairs is not None else None, source=train_table.name,
                               task_type="regression")
    validation = None
    if validation_file is not None:
        table = read_table(validation_file)
        vtexts, vpairs, vraw = _extract(table, columns, label_column)
        validation = ClassificationData(tuple(vtexts), _scores(table, vraw, label_column), (),
                                        tuple(vpairs) if vpairs is not None else None, source=str(validation_file),
                                        task_type="regression")
    return DataSplits(train=train, validation=validation, metrics=metrics)


def read_texts(path: str | Path, text_columns=None) -> tuple[list[int], list[str], list[str] | None]:
    """(line numbers, texts, second texts or None) of an unlabelled input file (``raptor predict``),
    with the text columns chosen as for training files."""
    table = read_table(path)
    columns = _resolve_text_columns(table, text_columns)
    table.require_columns(columns, role="text column")
    texts = [_text_value(r, columns[0], table.name) for r in table.records]
    pairs = [_text_value(r, columns[1], table.name) for r in table.records] if len(columns) == 2 else None
    return [r.line for r in table.records], texts, pairs
