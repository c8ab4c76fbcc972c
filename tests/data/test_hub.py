"""Hub loader, exercised with a fake ``datasets`` module (the hub is not reachable here)."""

from __future__ import annotations

import sys
import types

import pytest

from raptor.data import load_glue_hub
from raptor.errors import DataError


class FakeClassLabel:
    def __init__(self, names):
        self.names = list(names)


class FakeDataset:
    def __init__(self, columns: dict, label_names=None):
        self._columns = columns
        self.column_names = list(columns)
        self.features = {"label": FakeClassLabel(label_names)} if label_names is not None else {}

    def __getitem__(self, column):
        return list(self._columns[column])


def install_fake(monkeypatch, splits_for_task, calls=None):
    module = types.ModuleType("datasets")

    def load_dataset(path, name, cache_dir=None, revision=None):
        if calls is not None:
            calls.append((path, name, cache_dir, revision))
        result = splits_for_task(name)
        if isinstance(result, Exception):
            raise result
        return result

    module.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", module)


def test_single_sentence_task(monkeypatch):
    calls = []
    names = ["negative", "positive"]
    install_fake(monkeypatch, lambda task: {
        "train": FakeDataset({"sentence": ["good", "bad", "fine"], "label": [1, 0, 1], "idx": [0, 1, 2]}, names),
        "validation": FakeDataset({"sentence": ["ok"], "label": [1], "idx": [0]}, names),
        "test": FakeDataset({"sentence": ["?"], "label": [-1], "idx": [0]}, names),
    }, calls)
    splits = load_glue_hub("SST-2")
    assert calls == [("glue", "sst2", None, None)]
    assert splits.train.texts == ("good", "bad", "fine")
    assert splits.train.labels == (1, 0, 1)
    assert splits.validation.labels == (1,)
    assert splits.train.label_names == ("negative", "positive")
    assert splits.train.text_pairs is None


def test_mnli_pair_columns_and_validation_matched(monkeypatch):
    names = ["entailment", "neutral", "contradiction"]
    install_fake(monkeypatch, lambda task: {
        "train": FakeDataset({"premise": ["p1", "p2"], "hypothesis": ["h1", "h2"], "label": [0, 2]}, names),
        "validation_matched": FakeDataset({"premise": ["p"], "hypothesis": ["h"], "label": [1]}, names),
        "validation_mismatched": FakeDataset({"premise": ["x"], "hypothesis": ["y"], "label": [0]}, names),
    })
    splits = load_glue_hub("mnli")
    assert splits.train.text_pairs == ("h1", "h2")
    assert splits.validation.texts == ("p",)
    assert splits.validation.labels == (1,)


def test_label_names_must_match_spec(monkeypatch):
    install_fake(monkeypatch, lambda task: {
        "train": FakeDataset({"sentence1": ["a"], "sentence2": ["b"], "label": [0]}, ["not_entailment", "entailment"]),
        "validation": FakeDataset({"sentence1": ["a"], "sentence2": ["b"], "label": [0]}, ["entailment"]),
    })
    with pytest.raises(DataError, match=r"glue/rte\[train\]: label names .* differ"):
        load_glue_hub("rte")


def test_missing_column(monkeypatch):
    install_fake(monkeypatch, lambda task: {
        "train": FakeDataset({"sentence1": ["a"], "label": [0]}),
        "validation": FakeDataset({"sentence1": ["a"], "label": [0]}),
    })
    with pytest.raises(DataError, match=r"glue/mrpc\[train\]: missing column 'sentence2'"):
        load_glue_hub("mrpc")


def test_unlabeled_rows_rejected(monkeypatch):
    install_fake(monkeypatch, lambda task: {
        "train": FakeDataset({"sentence": ["a", "b"], "label": [0, -1]}),
        "validation": FakeDataset({"sentence": ["a"], "label": [0]}),
    })
    with pytest.raises(DataError, match=r"row 1: label -1 is not in range\(0, 2\)"):
        load_glue_hub("cola")


def test_missing_split(monkeypatch):
    install_fake(monkeypatch, lambda task: {"train": FakeDataset({"sentence": ["a"], "label": [0]})})
    with pytest.raises(DataError, match=r"glue/sst2\[validation\]: no such split"):
        load_glue_hub("sst2")


def test_network_error_is_a_data_error(monkeypatch):
    install_fake(monkeypatch, lambda task: ConnectionError("hub unreachable"))
    with pytest.raises(DataError, match=r"could not load glue/qqp .*hub unreachable.*local directory"):
        load_glue_hub("qqp")


def test_without_datasets_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` raise ImportError
    with pytest.raises(DataError, match=r"pip install raptor-dp\[hub\]"):
        load_glue_hub("sst2")
