"""Specifications of the GLUE tasks: files, columns, labels, validation split(s), metrics.

A :class:`TaskSpec` says, for one task, how to read it from the two places it comes from:

- the official GLUE release (``<glue>/<TASK>/{train,dev}.tsv``): the TSV column names, the raw
  label strings, and the validation file stem (``dev``; ``dev_matched`` for MNLI);
- the Hugging Face hub (``datasets.load_dataset("glue", name)``): the column names and the
  validation split name (``validation``; ``validation_matched`` for MNLI).

Label ids follow the hub's ``ClassLabel`` order, so both sources give the same id for the same
label. ``tsv_labels[i]`` is the raw TSV value of label id ``i`` and ``label_names[i]`` its name.
STS-B is the one regression task: its label is a float similarity score in [0, 5] (TSV column
``score``, hub column ``label``), read as a number; it has no label names.

Each spec names the task's GLUE metrics (:mod:`raptor.evaluation.metrics`), main metric first:
CoLA Matthews correlation; MRPC and QQP F1 and accuracy; STS-B Pearson and Spearman
correlation; the others accuracy. MNLI is scored on two validation files, ``dev_matched``
(named ``matched``) and ``dev_mismatched`` (``mismatched``; hub ``validation_mismatched``).
For example RTE's TSV labels are the strings ``entailment``/``not_entailment`` (ids 0/1), and
MNLI's are ``entailment``/``neutral``/``contradiction`` (ids 0/1/2), whereas SST-2's TSV has
``0``/``1`` for ``negative``/``positive``.

Header quirks of the official release (checked against the real files where we have them):

- MRPC files start with a UTF-8 byte-order mark and have the header
  ``Quality, #1 ID, #2 ID, #1 String, #2 String`` (the label is ``Quality``).
- CoLA's ``train.tsv`` and ``dev.tsv`` have **no header**: four positional columns, which we name
  ``source, label, original_label, sentence`` (source code, acceptability 0/1, the original
  author's mark, the sentence). A re-packaged CoLA file that does have a header line is
  recognised (see :mod:`raptor.data.glue_local`).
- MNLI's ``train.tsv`` and ``dev_matched.tsv`` have different column counts (the dev files carry
  five annotator labels); both have ``sentence1``, ``sentence2`` and ``gold_label``, which is all we
  read.
"""

from __future__ import annotations

from dataclasses import dataclass

from raptor.errors import ConfigError, DataError


@dataclass(frozen=True)
class TaskSpec:
    """How to read one GLUE classification task (see the module docstring).

    Fields:
        name: lower-case task name and hub config name (``"sst2"``).
        glue_dir: directory of the task in the official GLUE layout (``"SST-2"``).
        text_columns: TSV column(s) holding the input text: one, or two for a sentence pair.
        label_column: TSV column holding the label.
        tsv_labels: raw TSV value of each label id.
        label_names: name of each label id (the hub's ``ClassLabel`` names).
        validation_split: stem of the validation TSV (``"dev"``, or ``"dev_matched"`` for MNLI).
        hub_text_columns: the hub's column(s) for the input text, same arity as ``text_columns``.
        hub_validation_split: the hub's validation split name.
        headerless_columns: for TSVs without a header line (CoLA), the names given to the columns
            by position; ``None`` when the files have a header.
        task_type: ``"classification"`` or ``"regression"`` (STS-B: float labels, no label names).
        metrics: the task's GLUE metrics, main metric first.
        validation_name: the name of the validation split in results (``"dev"``; MNLI ``"matched"``).
        extra_validation: further validation splits as ``(name, TSV stem, hub split)``
            (MNLI: ``("mismatched", "dev_mismatched", "validation_mismatched")``).
    """

    name: str
    glue_dir: str
    text_columns: tuple[str, ...]
    label_column: str
    tsv_labels: tuple[str, ...]
    label_names: tuple[str, ...]
    validation_split: str
    hub_text_columns: tuple[str, ...]
    hub_validation_split: str = "validation"
    headerless_columns: tuple[str, ...] | None = None
    task_type: str = "classification"
    metrics: tuple[str, ...] = ("accuracy",)
    validation_name: str = "dev"
    extra_validation: tuple[tuple[str, str, str], ...] = ()

    def __post_init__(self) -> None:
        if len(self.text_columns) not in (1, 2):
            raise ConfigError(f"TaskSpec.text_columns must name 1 or 2 columns, got {self.text_columns!r}")
        if len(self.hub_text_columns) != len(self.text_columns):
            raise ConfigError(
                f"TaskSpec.hub_text_columns {self.hub_text_columns!r} must have as many columns as "
                f"text_columns {self.text_columns!r}"
            )
        from raptor.evaluation.metrics import check_metric_names

        check_metric_names(self.metrics, self.task_type)
        if self.task_type == "regression":
            if self.tsv_labels or self.label_names:
                raise ConfigError(f"TaskSpec {self.name}: a regression task has no tsv_labels or label_names")
        elif len(self.tsv_labels) != len(self.label_names) or len(self.label_names) < 2:
            raise ConfigError(
                f"TaskSpec {self.name}: tsv_labels {self.tsv_labels!r} and label_names {self.label_names!r} "
                f"must have the same length, at least 2"
            )
        if len(set(self.tsv_labels)) != len(self.tsv_labels):
            raise ConfigError(f"TaskSpec {self.name}: tsv_labels {self.tsv_labels!r} has duplicates")
        if self.headerless_columns is not None:
            missing = [c for c in (*self.text_columns, self.label_column) if c not in self.headerless_columns]
            if missing:
                raise ConfigError(f"TaskSpec {self.name}: headerless_columns lacks {missing}")

    @property
    def is_pair(self) -> bool:
        """Whether the input is a sentence pair."""
        return len(self.text_columns) == 2

    @property
    def is_regression(self) -> bool:
        return self.task_type == "regression"

    @property
    def num_labels(self) -> int:
        """Outputs of the head: the number of labels, 1 for regression."""
        return 1 if self.is_regression else len(self.label_names)

    @property
    def validation_splits(self) -> tuple[tuple[str, str, str], ...]:
        """Every validation split as ``(name, TSV stem, hub split)``, the main one first."""
        return ((self.validation_name, self.validation_split, self.hub_validation_split), *self.extra_validation)

    @property
    def has_header(self) -> bool:
        return self.headerless_columns is None

    def label_id(self, raw: str, *, where: str) -> int | float:
        """The id of a raw TSV label value (surrounding whitespace ignored), or the float score of a
        regression task; ``where`` names the file and line for the error."""
        value = raw.strip()
        if self.is_regression:
            return parse_score(value, where=where, column=self.label_column)
        try:
            return self.tsv_labels.index(value)
        except ValueError:
            raise DataError(
                f"{where}: unknown label {raw!r} in column {self.label_column!r}; task {self.name} "
                f"expects one of {', '.join(repr(v) for v in self.tsv_labels)}"
            ) from None


def parse_score(raw: str, *, where: str, column: str) -> float:
    """A regression label: a finite number, else :class:`DataError` naming ``where`` and ``column``."""
    import math

    try:
        value = float(raw)
    except ValueError:
        raise DataError(
            f"{where}: label {raw!r} in column {column!r} is not a number; a regression task needs a number "
            f"in every row"
        ) from None
    if not math.isfinite(value):
        raise DataError(f"{where}: label {raw!r} in column {column!r} is not finite; a regression label must be")
    return value


_BINARY = ("0", "1")
_ENTAILMENT = ("entailment", "not_entailment")

#: task name -> spec, for the nine GLUE tasks (eight classification tasks and STS-B, regression).
GLUE_TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec("sst2", "SST-2", ("sentence",), "label", _BINARY, ("negative", "positive"), "dev",
                 ("sentence",)),
        TaskSpec("mrpc", "MRPC", ("#1 String", "#2 String"), "Quality", _BINARY,
                 ("not_equivalent", "equivalent"), "dev", ("sentence1", "sentence2"), metrics=("f1", "accuracy")),
        TaskSpec("rte", "RTE", ("sentence1", "sentence2"), "label", _ENTAILMENT, _ENTAILMENT, "dev",
                 ("sentence1", "sentence2")),
        TaskSpec("cola", "CoLA", ("sentence",), "label", _BINARY, ("unacceptable", "acceptable"), "dev",
                 ("sentence",), headerless_columns=("source", "label", "original_label", "sentence"),
                 metrics=("matthews_correlation",)),
        TaskSpec("stsb", "STS-B", ("sentence1", "sentence2"), "score", (), (), "dev", ("sentence1", "sentence2"),
                 task_type="regression", metrics=("pearson", "spearman")),
        TaskSpec("qnli", "QNLI", ("question", "sentence"), "label", _ENTAILMENT, _ENTAILMENT, "dev",
                 ("question", "sentence")),
        TaskSpec("mnli", "MNLI", ("sentence1", "sentence2"), "gold_label",
                 ("entailment", "neutral", "contradiction"), ("entailment", "neutral", "contradiction"),
                 "dev_matched", ("premise", "hypothesis"), hub_validation_split="validation_matched",
                 validation_name="matched",
                 extra_validation=(("mismatched", "dev_mismatched", "validation_mismatched"),)),
        TaskSpec("qqp", "QQP", ("question1", "question2"), "is_duplicate", _BINARY,
                 ("not_duplicate", "duplicate"), "dev", ("question1", "question2"), metrics=("f1", "accuracy")),
        TaskSpec("wnli", "WNLI", ("sentence1", "sentence2"), "label", _BINARY,
                 ("not_entailment", "entailment"), "dev", ("sentence1", "sentence2")),
    )
}

#: accepted spellings -> task name ("SST-2", "sst-2", "SST2" all mean "sst2")
_ALIASES = {spec.glue_dir.lower(): name for name, spec in GLUE_TASKS.items()}


def get_task(task: str | TaskSpec) -> TaskSpec:
    """The :class:`TaskSpec` of a task name (case-insensitive; ``"SST-2"`` and ``"sst2"`` both work)."""
    if isinstance(task, TaskSpec):
        return task
    key = str(task).strip().lower()
    key = _ALIASES.get(key, key).replace("-", "")
    if key not in GLUE_TASKS:
        raise ConfigError(f"unknown GLUE task {task!r}; supported tasks are: {', '.join(GLUE_TASKS)}")
    return GLUE_TASKS[key]
