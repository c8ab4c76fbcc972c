"""Bad inputs of the library API (``raptor.load_model``, ``raptor.fine_tune``'s records): one
``ConfigError`` naming the argument, or the right result. Each case failed on the code before it:
``load_model(None)`` was a pathlib TypeError, ``load_model('')`` blamed the current directory,
``num_labels=10**9`` allocated the head for minutes until memory ran out (22 GB, killed), and
records whose texts are one token each (``{"sentence": "5"}``, or an int text) crashed the engine
on minilm-moe with ``RuntimeError: strides should be multiple of 16 bytes`` (docs/ERRORS.md, the
Python API section)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

import raptor
from raptor.errors import ConfigError
from raptor.moe.models import TinySize, build_model
from raptor.per_sample.capture import Offsets, grouped_outer


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tiny_model")
    build_model("switch_transformers", generator=torch.Generator().manual_seed(0),
                size=TinySize(vocab_size=64)).save_pretrained(d)
    return d


@pytest.mark.parametrize("name", [None, 3])
def test_load_model_of_no_name_names_the_argument(name):
    with pytest.raises(ConfigError, match=r"^load_model: name_or_path must be a model name or a save_pretrained "
                                          r"directory \(str or Path\)"):
        raptor.load_model(name)


@pytest.mark.parametrize("name", ["", "  "])
def test_load_model_of_an_empty_name_does_not_load_the_current_directory(name):
    with pytest.raises(ConfigError, match=r"^load_model\(''\): the model name is empty; give a shipped or built"):
        raptor.load_model(name)


@pytest.mark.parametrize("num_labels", [10**9, 100_001])
def test_a_huge_num_labels_is_refused_before_the_head_is_allocated(tiny_dir, num_labels):
    start = time.monotonic()
    with pytest.raises(ConfigError, match=rf"^num_labels must be an integer in \[1, 100,000\] .*got {num_labels}"):
        raptor.load_model(tiny_dir, num_labels=num_labels)
    assert time.monotonic() - start < 5


def test_num_labels_at_the_bound_and_one_still_load(tiny_dir):
    assert raptor.load_model(tiny_dir, num_labels=1).config.problem_type == "regression"
    assert raptor.load_model(tiny_dir, num_labels=3).config.num_labels == 3


def test_the_weight_gradient_of_one_row_on_a_ones_column_is_exact():
    # bert_moe (minilm-moe) records its expert biases as uses on a ones column: one token in a group
    # gives [1, 1] and [d, 1] operands whose strides the grouped kernel refuses
    g = torch.randn(1, 48, generator=torch.Generator().manual_seed(0))
    ones = torch.ones(1, 1)
    out = grouped_outer(g, ones, Offsets.of(torch.tensor([2]), 4))
    assert out.shape == (4, 48, 1)
    assert torch.equal(out[2], g.t() @ ones) and not out[[0, 1, 3]].any()

