"""The library's recipe and record entry points refuse bad arguments in one line naming them: an
unknown keyword (a nested config's field, or a typo), a non-bool ``lora``, a model name that is no
known kind, a record that lacks a column, a batch size not below the data (named as the field)."""

from __future__ import annotations

import pytest

import raptor
from raptor.errors import ConfigError, DataError


@pytest.mark.parametrize("kwargs, pattern", [
    ({"epsilon": 4}, r"default_recipe\(\) got an unknown keyword argument epsilon=; epsilon is a field of PrivacyConfig"),
    ({"stpes": 3}, r"unknown keyword argument stpes=; did you mean steps=\?"),
    ({"lora": "no"}, r"lora must be True, False or None .*got 'no'"),
    ({"model": "switch_transformer"}, r"model='switch_transformer' is no tiny family .*did you mean 'switch_transformers'"),
])
def test_default_recipe_refuses_bad_arguments(kwargs, pattern):
    # before: TypeError (unknown keywords), lora=True (truthiness), a pre-trained model's defaults (typo)
    with pytest.raises(ConfigError, match=pattern):
        raptor.default_recipe(**kwargs)


def test_the_other_recipes_refuse_an_unknown_keyword_by_name():
    with pytest.raises(ConfigError, match=r"tiny_recipe\(\) got an unknown keyword argument stpes="):
        raptor.tiny_recipe("dpsgd", stpes=1)


def test_known_names_keep_their_defaults():
    assert raptor.default_recipe(model="switch_transformers").lora is False
    assert raptor.default_recipe(model="minilm-moe").lora is True
    assert raptor.default_recipe(model="owner/some-hub-model").lora is True  # a hub name: pre-trained


def test_a_record_that_lacks_its_label_names_the_key():
    from raptor.data.loaders import from_records

    with pytest.raises(DataError, match=r"record 1 lacks 'label' \(its keys: \['score', 'sentence'\]\); give every "
                                        r"record its label, or name the column \(label_column=\)"):
        from_records([{"sentence": "a", "label": 0}, {"sentence": "b", "score": 1}], source="train")


def test_batch_size_not_below_the_data_names_the_field():
    from raptor.training.config import check_batch_size

    with pytest.raises(ConfigError, match=r"^batch_size 100 \(--batch-size\) must be below the 30 private records"):
        check_batch_size(100, 30)
