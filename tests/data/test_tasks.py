"""GLUE task specs: every task present, pair-ness, labels, validation splits, hub columns."""

from __future__ import annotations

import pytest

from raptor.data.tasks import GLUE_TASKS, TaskSpec, get_task
from raptor.errors import ConfigError, DataError


def test_all_eight_classification_tasks():
    assert set(GLUE_TASKS) == {"sst2", "mrpc", "rte", "cola", "qnli", "mnli", "qqp", "wnli"}


@pytest.mark.parametrize(
    "name, pair, num_labels, validation, hub_validation, hub_columns",
    [
        ("sst2", False, 2, "dev", "validation", ("sentence",)),
        ("cola", False, 2, "dev", "validation", ("sentence",)),
        ("mrpc", True, 2, "dev", "validation", ("sentence1", "sentence2")),
        ("rte", True, 2, "dev", "validation", ("sentence1", "sentence2")),
        ("wnli", True, 2, "dev", "validation", ("sentence1", "sentence2")),
        ("qnli", True, 2, "dev", "validation", ("question", "sentence")),
        ("qqp", True, 2, "dev", "validation", ("question1", "question2")),
        ("mnli", True, 3, "dev_matched", "validation_matched", ("premise", "hypothesis")),
    ],
)
def test_spec_fields(name, pair, num_labels, validation, hub_validation, hub_columns):
    spec = GLUE_TASKS[name]
    assert spec.is_pair is pair
    assert spec.num_labels == num_labels
    assert spec.validation_split == validation
    assert spec.hub_validation_split == hub_validation
    assert spec.hub_text_columns == hub_columns


def test_tsv_column_quirks():
    assert GLUE_TASKS["mrpc"].text_columns == ("#1 String", "#2 String")
    assert GLUE_TASKS["mrpc"].label_column == "Quality"
    assert GLUE_TASKS["cola"].has_header is False
    assert GLUE_TASKS["cola"].headerless_columns == ("source", "label", "original_label", "sentence")
    assert GLUE_TASKS["mnli"].label_column == "gold_label"
    assert GLUE_TASKS["qqp"].label_column == "is_duplicate"


def test_string_labels_map_to_hub_ids():
    rte = GLUE_TASKS["rte"]
    assert rte.label_id("entailment", where="x") == 0
    assert rte.label_id("not_entailment ", where="x") == 1
    mnli = GLUE_TASKS["mnli"]
    assert [mnli.label_id(v, where="x") for v in ("entailment", "neutral", "contradiction")] == [0, 1, 2]
    assert GLUE_TASKS["sst2"].label_names == ("negative", "positive")


def test_unknown_label_names_where_and_allowed():
    with pytest.raises(DataError, match=r"f\.tsv: line 7: unknown label 'maybe'.*'entailment', 'not_entailment'"):
        GLUE_TASKS["rte"].label_id("maybe", where="f.tsv: line 7")


@pytest.mark.parametrize("alias", ["sst2", "SST-2", "sst-2", "SST2"])
def test_aliases(alias):
    assert get_task(alias).name == "sst2"


def test_unknown_task():
    with pytest.raises(ConfigError, match="unknown GLUE task 'stsb'.*sst2"):
        get_task("stsb")


def test_spec_validation():
    with pytest.raises(ConfigError, match="text_columns"):
        TaskSpec("x", "X", ("a", "b", "c"), "label", ("0", "1"), ("n", "p"), "dev", ("a", "b", "c"))
    with pytest.raises(ConfigError, match="same length"):
        TaskSpec("x", "X", ("a",), "label", ("0", "1", "2"), ("n", "p"), "dev", ("a",))
