"""Public / private split: deterministic, disjoint, covering; a record is never both."""

from __future__ import annotations

import pytest

from raptor.data import ClassificationData, public_indices, separate_public, split_public_private
from raptor.data.public import PublicPrivateSplit
from raptor.errors import ConfigError, DataError


def make_data(n: int, *, duplicate_every: int = 0) -> ClassificationData:
    texts = [f"sentence {i}" if not duplicate_every or i % duplicate_every else "the same sentence" for i in range(n)]
    return ClassificationData(tuple(texts), tuple(i % 2 for i in range(n)), ("neg", "pos"), source="mem")


@pytest.mark.parametrize("n, size, expected", [(100, 10, 10), (100, 0.25, 25), (7, 0.5, 4), (67_349, 0.01, 673)])
def test_sizes(n, size, expected):
    assert len(public_indices(n, size, seed=0)) == expected


@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_never_both_public_and_private(seed):
    data = make_data(500, duplicate_every=7)
    split = split_public_private(data, public_size=0.2, seed=seed)
    pub, priv = set(split.public_indices), set(split.private_indices)
    # by index: disjoint, and together exactly the training split
    assert not pub & priv
    assert pub | priv == set(range(len(data)))
    # the private set excludes exactly the public indices, in order
    assert split.private_indices == tuple(i for i in range(len(data)) if i not in pub)
    # and the records themselves are the ones at those indices
    assert split.public.texts == tuple(data.texts[i] for i in split.public_indices)
    assert split.private.texts == tuple(data.texts[i] for i in split.private_indices)
    assert split.private.labels == tuple(data.labels[i] for i in split.private_indices)
    assert len(split.public) + len(split.private) == len(data)


def test_duplicates_are_distinct_records():
    """Identical sentences at different indices are different records; they may fall on either side."""
    data = make_data(200, duplicate_every=2)  # 100 copies of "the same sentence"
    split = split_public_private(data, public_size=50, seed=0)
    assert "the same sentence" in split.public.texts and "the same sentence" in split.private.texts
    assert not set(split.public_indices) & set(split.private_indices)


def test_deterministic_and_seed_dependent():
    a = public_indices(1000, 100, seed=3)
    assert a == public_indices(1000, 100, seed=3)
    assert a != public_indices(1000, 100, seed=4)
    assert a == tuple(sorted(a))


def test_depends_only_on_n_size_seed_not_content():
    a = split_public_private(make_data(300), public_size=30, seed=5)
    b = split_public_private(make_data(300, duplicate_every=3), public_size=30, seed=5)
    assert a.public_indices == b.public_indices


@pytest.mark.parametrize("size", [0, 100, 1.0, 0.0, -3, "10", True])
def test_bad_public_size(size):
    with pytest.raises(ConfigError, match="public_size"):
        public_indices(100, size)


def test_bad_seed():
    with pytest.raises(ConfigError, match="seed must be a non-negative integer"):
        public_indices(100, 10, seed=-1)


def test_separate_public_file_keeps_all_records_private():
    private = make_data(50)
    public = ClassificationData(("pub a", "pub b"), (0, 1), ("neg", "pos"), source="public.csv")
    split = separate_public(public, private)
    assert split.public_indices is None
    assert split.private_indices == tuple(range(50))
    assert split.private is private


def test_overlap_is_rejected():
    data = make_data(4)
    with pytest.raises(DataError, match="both public and private"):
        PublicPrivateSplit(data.subset([0, 1]), data.subset([1, 2]), (0, 1), (1, 2), rule="bad")
