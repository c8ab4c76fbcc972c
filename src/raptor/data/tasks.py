"""Specifications of the GLUE classification tasks: files, columns, labels, validation split.

A :class:`TaskSpec` says, for one task, how to read it from the two places it comes from:

- the official GLUE release (``<glue>/<TASK>/{train,dev}.tsv``): the TSV column names, the raw
  label strings, and the validation file stem (``dev``; ``dev_matched`` for MNLI);
- the Hugging Face hub (``datasets.load_dataset("glue", name)``): the column names and the
  validation split name (``validation``; ``validation_matched`` for MNLI).

Label ids follow the hub's ``ClassLabel`` order, so both sources give the same id for the same
label. ``tsv_labels[i]`` is the raw TSV value of label id ``i`` and ``label_names[i]`` its name.
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

    def __post_init__(self) -> None:
        if len(self.text_columns) not in (1, 2):
            raise ConfigError(f"TaskSpec.text_columns must name 1 or 2 columns, got {self.text_columns!r}")
        if len(self.hub_text_columns) != len(self.text_columns):
            raise ConfigError(
                f"TaskSpec.hub_text_columns {self.hub_text_columns!r} must have as many columns as "
                f"text_columns {self.text_columns!r}"
            )
        if len(self.tsv_labels) != len(self.label_names) or len(self.label_names) < 2:
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
    def num_labels(self) -> int:
        return len(self.label_names)

    @property
    def has_header(self) -> bool:
        return self.headerless_columns is None

    def label_id(self, raw: str, *, where: str) -> int:
        """The id of a raw TSV label value (surrounding whitespace ignored); ``where`` names the
        file and line for the error."""
        value = raw.strip()
        try:
            return self.tsv_labels.index(value)
        except ValueError:
            raise DataError(
                f"{where}: unknown label {raw!r} in column {self.label_column!r}; task {self.name} "
                f"expects one of {', '.join(repr(v) for v in self.tsv_labels)}"
            ) from None


_BINARY = ("0", "1")
_ENTAILMENT = ("entailment", "not_entailment")

#: task name -> spec, for the eight GLUE classification tasks (STS-B is regression: not included).
GLUE_TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec("sst2", "SST-2", ("sentence",), "label", _BINARY, ("negative", "positive"), "dev",
                 ("sentence",)),
        TaskSpec("mrpc", "MRPC", ("#1 String", "#2 String"), "Quality", _BINARY,
                 ("not_equivalent", "equivalent"), "dev", ("sentence1", "sentence2")),
        TaskSpec("rte", "RTE", ("sentence1", "sentence2"), "label", _ENTAILMENT, _ENTAILMENT, "dev",
                 ("sentence1", "sentence2")),
        TaskSpec("cola", "CoLA", ("sentence",), "label", _BINARY, ("unacceptable", "acceptable"), "dev",
                 ("sentence",), headerless_columns=("source", "label", "original_label", "sentence")),
        TaskSpec("qnli", "QNLI", ("question", "sentence"), "label", _ENTAILMENT, _ENTAILMENT, "dev",
                 ("question", "sentence")),
        TaskSpec("mnli", "MNLI", ("sentence1", "sentence2"), "gold_label",
                 ("entailment", "neutral", "contradiction"), ("entailment", "neutral", "contradiction"),
                 "dev_matched", ("premise", "hypothesis"), hub_validation_split="validation_matched"),
        TaskSpec("qqp", "QQP", ("question1", "question2"), "is_duplicate", _BINARY,
                 ("not_duplicate", "duplicate"), "dev", ("question1", "question2")),
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
