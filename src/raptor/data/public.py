"""The public / private split: which records may be used freely and which are protected.

raptor uses a small **public** corpus for everything that must not touch private records: training
the tokenizer, warm-starting the model, and measuring routing statistics (public owner shares,
layer choice). It comes from one of two places:

1. :func:`split_public_private` carves a deterministic slice out of the training split. The
   public records are ``public_size`` record indices chosen by a seeded permutation of
   ``range(N)`` (``numpy.random.Generator(PCG64(seed))``); the private set is the complement.
   The choice depends only on ``N``, ``public_size`` and ``seed``, never on the records' content.
2. :func:`separate_public` takes a public corpus from a separate file; the whole training split
   stays private.

A record is never both public and private: the public and private index sets of
:class:`PublicPrivateSplit` are disjoint and together cover ``range(N)`` (a test checks this).
Records are identified by index, not by text: if the same sentence occurs twice in the training
split (SST-2 repeats many phrases), the two occurrences are distinct records and may fall on
different sides. The private copy is then still protected as a record (its membership and label);
the public copy's text is public because the data owner put it in the public slice.

Privacy: ``public_size`` given as a fraction is resolved against ``N``, the size of the training
split, which the data owner knows and which fixes the split before any training; prefer an
integer count when ``N`` itself must stay hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from raptor.data.dataset import ClassificationData
from raptor.errors import ConfigError, DataError


@dataclass(frozen=True)
class PublicPrivateSplit:
    """The public corpus and the private records.

    Fields:
        public: records usable without privacy accounting (tokenizer, warm start, routing stats).
        private: records every private computation must protect.
        public_indices: indices of the public records in the original training split (sorted);
            ``None`` when the public corpus came from a separate file.
        private_indices: indices of the private records in the original training split (sorted).
        rule: a one-line description of how the split was made (for results files).
    """

    public: ClassificationData
    private: ClassificationData
    public_indices: tuple[int, ...] | None
    private_indices: tuple[int, ...]
    rule: str

    def __post_init__(self) -> None:
        if len(self.private_indices) != len(self.private):
            raise DataError(f"{len(self.private_indices)} private indices for {len(self.private)} private records")
        if self.public_indices is not None:
            if len(self.public_indices) != len(self.public):
                raise DataError(f"{len(self.public_indices)} public indices for {len(self.public)} public records")
            overlap = set(self.public_indices) & set(self.private_indices)
            if overlap:
                raise DataError(f"records {sorted(overlap)[:10]} would be both public and private")


def resolve_public_size(public_size: int | float, n: int) -> int:
    """The number of public records: an int count, or a fraction in (0, 1) of ``n`` (rounded)."""
    if isinstance(public_size, bool) or not isinstance(public_size, (int, float)):
        raise ConfigError(f"public_size must be an int count or a float fraction, got {public_size!r}")
    if isinstance(public_size, float):
        if not 0.0 < public_size < 1.0:
            raise ConfigError(f"public_size as a fraction must be in (0, 1), got {public_size}")
        count = round(public_size * n)
    else:
        count = public_size
    if not 1 <= count <= n - 1:
        raise ConfigError(
            f"public_size={public_size!r} gives {count} public records out of {n}; it must leave at least "
            f"one public and one private record (1 <= count <= {n - 1})"
        )
    return count


def public_indices(n: int, public_size: int | float, *, seed: int = 0) -> tuple[int, ...]:
    """The sorted indices of the public slice of a training split of ``n`` records.

    The first ``count`` entries of a permutation of ``range(n)`` drawn from
    ``numpy.random.Generator(PCG64(seed))``. Depends only on ``(n, public_size, seed)``.
    """
    count = resolve_public_size(public_size, n)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
    generator = np.random.Generator(np.random.PCG64(seed))
    chosen = generator.permutation(n)[:count]
    return tuple(sorted(int(i) for i in chosen))


def split_public_private(train: ClassificationData, *, public_size: int | float, seed: int = 0) -> PublicPrivateSplit:
    """Carve a deterministic public slice out of ``train``; the rest is private."""
    n = len(train)
    pub = public_indices(n, public_size, seed=seed)
    chosen = set(pub)
    priv = tuple(i for i in range(n) if i not in chosen)
    return PublicPrivateSplit(
        public=train.subset(pub, source=f"{train.source} (public slice)"),
        private=train.subset(priv, source=f"{train.source} (private)"),
        public_indices=pub,
        private_indices=priv,
        rule=f"public = {len(pub)} of {n} train records by PCG64 permutation (seed {seed}); private = the rest",
    )


def separate_public(public: ClassificationData, private: ClassificationData) -> PublicPrivateSplit:
    """Use a separately provided public corpus; every training record stays private."""
    if public.is_pair != private.is_pair:
        raise DataError(
            f"{public.source}: the public corpus and the private data ({private.source}) disagree on pair input"
        )
    return PublicPrivateSplit(
        public=public,
        private=private,
        public_indices=None,
        private_indices=tuple(range(len(private))),
        rule=f"public = separate corpus {public.source} ({len(public)} records); private = all train records",
    )
