"""The in-memory dataset type every loader returns.

:class:`ClassificationData` holds one split: the texts (and, for pair tasks, the second texts),
integer labels and the label names; or, for a regression task (``task_type="regression"``: STS-B,
user files with float labels), float labels and no label names. ``TaskData`` is another name for
it. It is immutable; :meth:`ClassificationData.subset` makes a
new one from record indices. :class:`DataSplits` bundles a train and a validation split.

A record is identified by its index in the split, never by its text: two records with the same
sentence (SST-2 has many repeated phrases) are distinct records.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from raptor.errors import DataError


@dataclass(frozen=True)
class ClassificationData:
    """One split of a text-classification (or regression) dataset.

    Fields:
        texts: the (first) input text of each record.
        labels: label id of each record, in ``range(len(label_names))``; for regression, a finite
            float per record.
        label_names: the name of each label id (empty for regression).
        text_pairs: the second input text of each record for pair tasks, else ``None``.
        source: where the records came from (file or hub split), for messages and results files.
        task_type: ``"classification"`` or ``"regression"``.
    """

    texts: tuple[str, ...]
    labels: tuple[int, ...] | tuple[float, ...]
    label_names: tuple[str, ...]
    text_pairs: tuple[str, ...] | None = None
    source: str = ""
    task_type: str = "classification"

    def __post_init__(self) -> None:
        for field in ("texts", "labels", "label_names", "text_pairs"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, field, tuple(value))
        n = len(self.texts)
        if len(self.labels) != n:
            raise DataError(f"{self.source or 'dataset'}: {n} texts but {len(self.labels)} labels")
        if self.text_pairs is not None and len(self.text_pairs) != n:
            raise DataError(f"{self.source or 'dataset'}: {n} texts but {len(self.text_pairs)} second texts")
        if self.task_type == "regression":
            self._check_scores()
            return
        if self.task_type != "classification":
            raise DataError(f"{self.source or 'dataset'}: task_type must be 'classification' or 'regression', "
                            f"got {self.task_type!r}")
        k = len(self.label_names)
        if k < 2:
            raise DataError(
                f"{self.source or 'dataset'}: {k} label name(s) {list(self.label_names)}; "
                f"classification needs at least 2 labels"
            )
        bad = next((y for y in self.labels if not isinstance(y, int) or not 0 <= y < k), None)
        if bad is not None:
            raise DataError(f"{self.source or 'dataset'}: label id {bad!r} is outside range(0, {k})")

    def _check_scores(self) -> None:
        import math

        if self.label_names:
            raise DataError(f"{self.source or 'dataset'}: a regression split has no label names, got "
                            f"{list(self.label_names)}")
        bad = next((y for y in self.labels if isinstance(y, bool) or not isinstance(y, (int, float))
                    or not math.isfinite(y)), None)
        if bad is not None:
            raise DataError(f"{self.source or 'dataset'}: regression label {bad!r} is not a finite number")
        object.__setattr__(self, "labels", tuple(float(y) for y in self.labels))

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def is_regression(self) -> bool:
        return self.task_type == "regression"

    @property
    def is_pair(self) -> bool:
        return self.text_pairs is not None

    @property
    def num_labels(self) -> int:
        """Outputs of the head: the number of labels, 1 for regression (the Hugging Face convention)."""
        return 1 if self.is_regression else len(self.label_names)

    def subset(self, indices: Sequence[int], *, source: str | None = None) -> ClassificationData:
        """The records at ``indices`` (in that order)."""
        idx = [int(i) for i in indices]
        n = len(self)
        bad = next((i for i in idx if not 0 <= i < n), None)
        if bad is not None:
            raise DataError(f"{self.source or 'dataset'}: record index {bad} is outside range(0, {n})")
        return ClassificationData(
            texts=tuple(self.texts[i] for i in idx),
            labels=tuple(self.labels[i] for i in idx),
            label_names=self.label_names,
            text_pairs=None if self.text_pairs is None else tuple(self.text_pairs[i] for i in idx),
            source=self.source if source is None else source,
            task_type=self.task_type,
        )

    def corpus(self) -> Iterator[str]:
        """Every text of the split (both sides of a pair), for training a tokenizer."""
        yield from self.texts
        if self.text_pairs is not None:
            yield from self.text_pairs

    def label_counts(self) -> tuple[int, ...]:
        """How many records carry each label id.

        Privacy: on a private split this is a statistic of private records; use it for tests and
        public data only.
        """
        if self.is_regression:
            raise DataError(f"{self.source or 'dataset'}: a regression split has no label counts")
        counts = [0] * self.num_labels
        for y in self.labels:
            counts[y] += 1
        return tuple(counts)


TaskData = ClassificationData


@dataclass(frozen=True)
class DataSplits:
    """A train split and optional validation split(s) with the same label names and task type.

    Fields:
        train, validation: the splits (``validation`` may be ``None``).
        validation_name: the validation split's name in results (``"dev"``; MNLI ``"matched"``).
        extra_validation: further named validation splits (MNLI: ``(("mismatched", data),)``).
        metrics: the task's metric names, main first; empty: the defaults of the task type
            (:data:`raptor.evaluation.metrics.DEFAULT_METRICS`).
    """

    train: ClassificationData
    validation: ClassificationData | None = None
    validation_name: str = "dev"
    extra_validation: tuple[tuple[str, ClassificationData], ...] = ()
    metrics: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.extra_validation and self.validation is None:
            raise DataError(f"{self.train.source}: extra validation splits need a main validation split")
        for _, v in ((None, self.validation), *self.extra_validation):
            if v is not None:
                self._check_matches(v)

    def _check_matches(self, v: ClassificationData) -> None:
        if v.task_type != self.train.task_type:
            raise DataError(f"{v.source}: a {v.task_type} validation split for a {self.train.task_type} train "
                            f"split ({self.train.source})")
        if v.label_names != self.train.label_names:
            raise DataError(
                f"{v.source}: validation label names {list(v.label_names)} differ from the train "
                f"label names {list(self.train.label_names)} ({self.train.source})"
            )
        if v.is_pair != self.train.is_pair:
            raise DataError(f"{v.source}: validation and train ({self.train.source}) disagree on pair input")

    @property
    def label_names(self) -> tuple[str, ...]:
        return self.train.label_names

    @property
    def task_type(self) -> str:
        return self.train.task_type

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The task's metrics, main first (the task type's defaults when none were given)."""
        from raptor.evaluation.metrics import DEFAULT_METRICS

        return self.metrics or DEFAULT_METRICS[self.task_type]

    def validation_sets(self) -> dict[str, ClassificationData]:
        """``{name: split}`` of every validation split, the main one first (empty without one)."""
        if self.validation is None:
            return {}
        return {self.validation_name: self.validation, **dict(self.extra_validation)}
