"""The in-memory dataset type every loader returns.

:class:`ClassificationData` holds one split: the texts (and, for pair tasks, the second texts),
integer labels and the label names. It is immutable; :meth:`ClassificationData.subset` makes a
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
    """One split of a text-classification dataset.

    Fields:
        texts: the (first) input text of each record.
        labels: label id of each record, in ``range(len(label_names))``.
        label_names: the name of each label id.
        text_pairs: the second input text of each record for pair tasks, else ``None``.
        source: where the records came from (file or hub split), for messages and results files.
    """

    texts: tuple[str, ...]
    labels: tuple[int, ...]
    label_names: tuple[str, ...]
    text_pairs: tuple[str, ...] | None = None
    source: str = ""

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
        k = len(self.label_names)
        if k < 2:
            raise DataError(
                f"{self.source or 'dataset'}: {k} label name(s) {list(self.label_names)}; "
                f"classification needs at least 2 labels"
            )
        bad = next((y for y in self.labels if not isinstance(y, int) or not 0 <= y < k), None)
        if bad is not None:
            raise DataError(f"{self.source or 'dataset'}: label id {bad!r} is outside range(0, {k})")

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def is_pair(self) -> bool:
        return self.text_pairs is not None

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

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
        counts = [0] * self.num_labels
        for y in self.labels:
            counts[y] += 1
        return tuple(counts)


@dataclass(frozen=True)
class DataSplits:
    """A train split and an optional validation split with the same label names."""

    train: ClassificationData
    validation: ClassificationData | None = None

    def __post_init__(self) -> None:
        v = self.validation
        if v is None:
            return
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
