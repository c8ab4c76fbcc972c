"""The SST-2 sample bundled in the package: present, small, and reproducible from GLUE."""

from __future__ import annotations

import gzip

from raptor.data import load_bundled_sst2, load_glue_dir
from raptor.data.sample import SAMPLE_MIN_TOKENS, bundled_dir, sample_lines


def test_bundled_sample_loads_without_shared_data():
    splits = load_bundled_sst2()
    assert (len(splits.train), len(splits.validation)) == (8000, 872)
    assert splits.train.label_names == ("negative", "positive")
    assert all(len(t.split()) >= SAMPLE_MIN_TOKENS for t in splits.train.texts)
    assert set(splits.train.labels) == {0, 1}


def test_bundle_is_small_and_documented():
    folder = bundled_dir()
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert size < 400_000
    readme = (folder / "README.md").read_text()
    assert "GLUE SST-2" in readme and "public" in readme


def test_bundle_reproduces_from_glue(glue_dir):
    train_text, dev_text = sample_lines(glue_dir)
    folder = bundled_dir() / "SST-2"
    assert gzip.decompress((folder / "train.tsv.gz").read_bytes()).decode() == train_text
    assert gzip.decompress((folder / "dev.tsv.gz").read_bytes()).decode() == dev_text
    full = load_glue_dir(glue_dir, "sst2")
    assert load_bundled_sst2().validation.labels == full.validation.labels
    # every bundled train row is a row of the real train split, with its label
    real = set(zip(full.train.texts, full.train.labels))
    bundled = load_bundled_sst2().train
    assert set(zip(bundled.texts, bundled.labels)) <= real
