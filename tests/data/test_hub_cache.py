"""GLUE from the local Hugging Face datasets cache: real Arrow files written by ``datasets``, read
offline; a missing cache is a clear error, never a download or a hang."""

from __future__ import annotations

import sys

import pytest

from raptor.data import load_glue_cache
from raptor.data.hub import cached_task_dir
from raptor.errors import DataError

datasets = pytest.importorskip("datasets")


def write_cached_split(root, task, split, columns, features, *, shards=1, version_hash=("0.0.0", "f00d")):
    """Write ``glue-<split>.arrow`` (or shards) where load_dataset('nyu-mll/glue', task) caches it."""
    directory = root / "nyu-mll___glue" / task / version_hash[0] / version_hash[1]
    directory.mkdir(parents=True, exist_ok=True)
    ds = datasets.Dataset.from_dict(columns, features=features)
    n = len(ds)
    for i in range(shards):
        part = ds.select(range(i * n // shards, (i + 1) * n // shards))
        tmp = root / "tmp" / f"{task}-{split}-{i}"
        part.save_to_disk(str(tmp))
        name = f"glue-{split}.arrow" if shards == 1 else f"glue-{split}-{i:05d}-of-{shards:05d}.arrow"
        next(tmp.glob("*.arrow")).rename(directory / name)
    return directory


def _sst2_features():
    return datasets.Features({"sentence": datasets.Value("string"),
                              "label": datasets.ClassLabel(names=["negative", "positive"]),
                              "idx": datasets.Value("int32")})


def test_sst2_from_cache_with_sharded_train(tmp_path):
    f = _sst2_features()
    write_cached_split(tmp_path, "sst2", "train", {"sentence": ["good", "bad", "fine", "meh"], "label": [1, 0, 1, 0],
                                                   "idx": [0, 1, 2, 3]}, f, shards=2)
    write_cached_split(tmp_path, "sst2", "validation", {"sentence": ["ok"], "label": [1], "idx": [0]}, f)
    splits = load_glue_cache("SST-2", cache_dir=tmp_path)
    assert splits.train.texts == ("good", "bad", "fine", "meh") and splits.train.labels == (1, 0, 1, 0)
    assert splits.validation.labels == (1,) and splits.train.label_names == ("negative", "positive")


def test_stsb_and_mnli_from_cache(tmp_path):
    f = datasets.Features({"sentence1": datasets.Value("string"), "sentence2": datasets.Value("string"),
                           "label": datasets.Value("float32"), "idx": datasets.Value("int32")})
    cols = {"sentence1": ["a", "b"], "sentence2": ["c", "d"], "label": [4.5, 0.25], "idx": [0, 1]}
    write_cached_split(tmp_path, "stsb", "train", cols, f)
    write_cached_split(tmp_path, "stsb", "validation", cols, f)
    stsb = load_glue_cache("stsb", cache_dir=tmp_path)
    assert stsb.task_type == "regression" and stsb.train.labels == (4.5, 0.25)
    assert stsb.metric_names == ("pearson", "spearman")

    names = ["entailment", "neutral", "contradiction"]
    f = datasets.Features({"premise": datasets.Value("string"), "hypothesis": datasets.Value("string"),
                           "label": datasets.ClassLabel(names=names), "idx": datasets.Value("int32")})
    for split, label in (("train", 0), ("validation_matched", 1), ("validation_mismatched", 2)):
        write_cached_split(tmp_path, "mnli", split, {"premise": [split], "hypothesis": ["h"], "label": [label],
                                                     "idx": [0]}, f)
    sets = load_glue_cache("mnli", cache_dir=tmp_path).validation_sets()
    assert list(sets) == ["matched", "mismatched"]
    assert sets["matched"].labels == (1,) and sets["mismatched"].texts == ("validation_mismatched",)


def test_missing_cache_is_a_clear_error_without_network(tmp_path, monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("load_glue_cache must not call load_dataset")

    monkeypatch.setattr(datasets, "load_dataset", no_network)
    with pytest.raises(DataError, match=r"no cached copy of glue/cola in the Hugging Face datasets cache .*"
                                        r"nyu-mll___glue/cola/<version>/<hash>/glue-train.arrow.*--data-dir DIR"):
        load_glue_cache("cola", cache_dir=tmp_path)
    f = _sst2_features()
    write_cached_split(tmp_path, "sst2", "train", {"sentence": ["a"], "label": [1], "idx": [0]}, f)
    with pytest.raises(DataError, match=r"glue/cola"):  # another task's copy does not count
        cached_task_dir("cola", tmp_path)
    with pytest.raises(DataError, match=r"glue/sst2\[validation\]: no such split"):
        load_glue_cache("sst2", cache_dir=tmp_path)


def test_without_datasets_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(DataError, match=r"pip install raptor-dp\[hub\]"):
        load_glue_cache("sst2")
