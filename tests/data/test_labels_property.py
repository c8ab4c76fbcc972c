"""Property tests of the label validation layer (issue 35, :mod:`raptor.data.labels`): any list of
label values either maps to ids whose names round-trip to the values, or is refused with a
:class:`~raptor.errors.DataError` naming the record; nothing else is ever raised."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raptor.data.labels import align_label_words, label_ids, label_map, label_map_line
from raptor.data.user_files import canonical_label
from raptor.errors import ConfigError, DataError

VALUES = st.one_of(
    st.integers(min_value=-2, max_value=6),
    st.sampled_from([0.0, 1.0, 2.0, 0.5, -1.5, math.nan, math.inf, -math.inf]),
    st.sampled_from(["a", "b", "pos", "neg", "1", "1.0", "+1", "10", "9", "nan", "inf", "", " ", "x_1"]),
    st.booleans(),
    st.sampled_from([None, [1], {"a": 1}, b"1"]),
)


def _name(value) -> str:
    """The class name a value must have (the rule of files: a whole number is its integer)."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, int):
        return str(value)
    return canonical_label(value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(VALUES, min_size=1, max_size=25))
def test_labels_round_trip_or_are_refused(values):
    try:
        names, ids = label_ids(values, source="train")
    except DataError as err:
        assert re.match(r"train: (record \d+: label .* |every label is )", str(err)), str(err)  # names the record
        return
    assert len(ids) == len(values) and len(set(names)) == len(names) >= 2
    assert all(names[i] == _name(v) for v, i in zip(values, ids))
    assert len({type(v) is bool for v in values}) == 1  # one type: never booleans beside numbers
    assert len({isinstance(v, str) for v in values}) == 1  # nor strings beside numbers
    assert all(not isinstance(v, float) or math.isfinite(v) for v in values)  # no NaN class
    # a validation split with the same labels gets the same ids from the training names
    assert label_ids(values, source="validation", label_names=names) == (names, ids)
    entries = label_map(names)
    assert [e["id"] for e in entries] == list(range(len(names))) and [e["label"] for e in entries] == list(names)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["no", "yes", "maybe", "No", "YES"]), min_size=2, max_size=3, unique=True),
       st.permutations(range(3)), st.lists(st.sampled_from(["no", "yes", "maybe", "good", "bad"]), min_size=1,
                                           max_size=3))
def test_label_words_go_to_the_labels_they_name(names, order, other_words):
    names = sorted(names)
    as_named = [names[i] for i in order if i < len(names)]  # the label names, in some order
    assert align_label_words(names, as_named) == names
    try:
        words = align_label_words(names, other_words)
    except ConfigError as err:
        assert str(err).startswith("label_words: ")
        return
    assert len(words) == len(names)
    assert all(w not in names or names.index(w) == i for i, w in enumerate(words))  # never another label's word
    line = label_map_line(names, words)
    assert all(f"{n!r} -> {i} -> {w!r}" in line for i, (n, w) in enumerate(zip(names, words)))


@pytest.mark.parametrize("values,pattern", [
    ([1, 2, "x"], r"record 2: label 'x' is a string, but record 0's label 1 is a number"),
    ([0, 1, math.nan], r"record 2: label nan is not a finite number"),
    ([True, 1], r"record 1: label 1 is a number, but record 0's label True is a boolean"),
    (["a", None], r"record 1: label None is a NoneType, but"),
])
def test_a_refusal_names_the_record_and_the_value(values, pattern):
    with pytest.raises(DataError, match=pattern):
        label_ids(values, source="train")
