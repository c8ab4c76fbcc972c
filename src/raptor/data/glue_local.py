"""Loading a GLUE task from a local directory in the official TSV layout.

Layout: ``<root>/<TASK>/train.tsv`` and ``<root>/<TASK>/<validation>.tsv`` where ``<TASK>`` is the
spec's ``glue_dir`` (``SST-2``, ``MRPC``, ``RTE``, ``STS-B`` ...) and ``<validation>`` is ``dev``
(MNLI: ``dev_matched``, and ``dev_mismatched`` as a second validation split when that file is
there too). ``root`` may also be the task directory itself. ``.tsv.gz`` files are read too.
STS-B's ``score`` column is read as a float (a non-number is an error naming file and line).

Files are read with ``csv.QUOTE_NONE`` (see :mod:`raptor.data.textio`), so each line is one
record and quote characters stay in the text; columns are found by header name, so extra columns
(indices, ids, parses, annotator labels) are ignored. CoLA's files have no header in the
official release and are read by position; if the first line of a CoLA file is a header (a
re-packaged copy), it is recognised because its label cell is not a label while one of its cells
is the name of the text column, and skipped.

Row counts of the official release (checked by the tests on the real files where present):
SST-2 67,349 train / 872 dev; MRPC 3,668 train / 408 dev in the GLUE paper and on the hub (the copy
of ``train.tsv`` checked here has 3,667 rows); RTE 2,490 / 277; STS-B 5,749 / 1,500; WNLI 635 / 71.
"""

from __future__ import annotations

from pathlib import Path

from raptor.data.dataset import ClassificationData, DataSplits
from raptor.data.tasks import TaskSpec, get_task
from raptor.data.textio import Table, decode_utf8, parse_delimited, read_bytes
from raptor.errors import DataError


def task_dir(root: str | Path, task: str | TaskSpec) -> Path:
    """The directory holding the task's TSVs: ``root/<TASK>`` or ``root`` itself."""
    spec = get_task(task)
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: GLUE directory not found; expected a folder containing {spec.glue_dir}/train.tsv")
    for candidate in (root / spec.glue_dir, root):
        if _find(candidate, "train") is not None:
            return candidate
    raise DataError(
        f"{root}: no {spec.glue_dir}/train.tsv (nor train.tsv) here; expected the official GLUE layout "
        f"<glue>/{spec.glue_dir}/train.tsv and <glue>/{spec.glue_dir}/{spec.validation_split}.tsv"
    )


def _find(directory: Path, stem: str) -> Path | None:
    for suffix in (".tsv", ".tsv.gz"):
        path = directory / f"{stem}{suffix}"
        if path.is_file():
            return path
    return None


def _parse(path: Path, spec: TaskSpec) -> Table:
    name = str(path)
    text = decode_utf8(read_bytes(path), name)
    if spec.has_header:
        table = parse_delimited(text, name, "tsv")
        table.require_columns(spec.text_columns, role="text column")
        table.require_columns((spec.label_column,), role="label column")
        return table
    table = parse_delimited(text, name, "tsv", columns=spec.headerless_columns)
    first = table.records[0].fields
    if first[spec.label_column].strip() not in spec.tsv_labels and any(
        first[c].strip() == c for c in spec.text_columns
    ):
        if len(table.records) == 1:
            raise DataError(f"{name}: file is empty: it has a header line but no records")
        table = Table(table.name, table.columns, table.records[1:])
    return table


def read_glue_tsv(path: str | Path, task: str | TaskSpec) -> ClassificationData:
    """One split of a GLUE task from its TSV file (any split with labels: train, dev, dev_mismatched)."""
    spec = get_task(task)
    path = Path(path)
    table = _parse(path, spec)
    texts: list[str] = []
    pairs: list[str] = []
    labels: list[int | float] = []
    for record in table.records:
        f = record.fields
        labels.append(spec.label_id(f[spec.label_column], where=f"{path}: line {record.line}"))
        texts.append(f[spec.text_columns[0]])
        if spec.is_pair:
            pairs.append(f[spec.text_columns[1]])
    return ClassificationData(
        texts=tuple(texts),
        labels=tuple(labels),
        label_names=spec.label_names,
        text_pairs=tuple(pairs) if spec.is_pair else None,
        source=str(path),
        task_type=spec.task_type,
    )


def load_glue_dir(root: str | Path, task: str | TaskSpec) -> DataSplits:
    """Train and validation split(s) of ``task`` from a local GLUE directory (official TSV layout).

    MNLI: ``dev_matched`` is the validation split (``matched``); ``dev_mismatched``, when present,
    is a second one (``mismatched``).
    """
    spec = get_task(task)
    directory = task_dir(root, spec)
    train = read_glue_tsv(_find(directory, "train"), spec)
    dev_path = _find(directory, spec.validation_split)
    if dev_path is None:
        raise DataError(
            f"{directory}: no {spec.validation_split}.tsv; task {spec.name} takes its validation split "
            f"from {spec.validation_split}.tsv in the official GLUE layout"
        )
    extra = tuple((name, read_glue_tsv(path, spec)) for name, stem, _ in spec.extra_validation
                  if (path := _find(directory, stem)) is not None)
    return DataSplits(train=train, validation=read_glue_tsv(dev_path, spec), validation_name=spec.validation_name,
                      extra_validation=extra, metrics=spec.metrics)
