"""GLUE task specs: every task present, pair-ness, labels, validation splits, hub columns."""

from __future__ import annotations

import pytest

from raptor.data.tasks import GLUE_TASKS, TaskSpec, get_task
from raptor.errors import ConfigError, DataError


def test_all_nine_tasks():
    assert set(GLUE_TASKS) == {"sst2", "mrpc", "rte", "cola", "qnli", "mnli", "qqp", "wnli", "stsb"}
    assert [n for n, s in GLUE_TASKS.items() if s.is_regression] == ["stsb"]


@pytest.mark.parametrize("name, metrics", [
    ("cola", ("matthews_correlation",)), ("mrpc", ("f1", "accuracy")), ("qqp", ("f1", "accuracy")),
    ("stsb", ("pearson", "spearman")), ("mnli", ("accuracy",)), ("sst2", ("accuracy",)), ("qnli", ("accuracy",)),
    ("rte", ("accuracy",)), ("wnli", ("accuracy",)),
])
def test_each_task_names_its_glue_metrics(name, metrics):
    assert GLUE_TASKS[name].metrics == metrics


def test_mnli_has_matched_and_mismatched_validation():
    assert GLUE_TASKS["mnli"].validation_splits == (
        ("matched", "dev_matched", "validation_matched"), ("mismatched", "dev_mismatched", "validation_mismatched"))
    assert GLUE_TASKS["sst2"].validation_splits == (("dev", "dev", "validation"),)


def test_stsb_is_regression_with_float_scores():
    stsb = get_task("STS-B")
    assert stsb.num_labels == 1 and stsb.label_column == "score" and stsb.is_pair
    assert stsb.label_id(" 3.800 ", where="x") == pytest.approx(3.8)
    with pytest.raises(DataError, match=r"f\.tsv: line 4: label 'high' in column 'score' is not a number"):
        stsb.label_id("high", where="f.tsv: line 4")
    with pytest.raises(DataError, match="not finite"):
        stsb.label_id("nan", where="f.tsv: line 5")


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
        ("stsb", True, 1, "dev", "validation", ("sentence1", "sentence2")),
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
    with pytest.raises(ConfigError, match="unknown GLUE task 'sts'.*sst2"):
        get_task("sts")


def test_spec_validation():
    with pytest.raises(ConfigError, match="text_columns"):
        TaskSpec("x", "X", ("a", "b", "c"), "label", ("0", "1"), ("n", "p"), "dev", ("a", "b", "c"))
    with pytest.raises(ConfigError, match="same length"):
        TaskSpec("x", "X", ("a",), "label", ("0", "1", "2"), ("n", "p"), "dev", ("a",))
