"""Bad inputs of the own-loop path (``raptor.PrivacyEngine`` and ``make_private``): each is one
``ConfigError`` naming the argument (``target_epsilon``, ``model=``, ``optimizer=``,
``data_loader``, ``PrivacyEngine(batch_size=...)``) and what to give instead, before any update.
Each case failed on the code before it: an AttributeError deep in the assembly, "model_type None",
or a message naming a CLI flag or another class's field (docs/ERRORS.md, the Python API section)."""

from __future__ import annotations

import math

import pytest
import torch
from tiny import PUBLIC, TRAIN, ItemDataset, tiny_model

import raptor
from raptor.errors import ConfigError
from raptor.recipes import tiny_recipe


def _engine(**kw) -> raptor.PrivacyEngine:
    base = dict(config=tiny_recipe("raptor", steps=2, batch_size=8), public=PUBLIC)
    return raptor.PrivacyEngine(**{**base, **kw})


_OLMOE = object()


def _private(engine, model=_OLMOE, data=None, optimizer=None):
    model = tiny_model("olmoe") if model is _OLMOE else model
    if optimizer is None:
        params = model.parameters() if isinstance(model, torch.nn.Module) else [torch.nn.Parameter(torch.zeros(1))]
        optimizer = torch.optim.SGD(params, lr=0.1)
    return engine.make_private(model=model, optimizer=optimizer, data_loader=ItemDataset(TRAIN) if data is None else data)


@pytest.mark.parametrize("epsilon", [0, -2.0, math.nan])
def test_a_target_epsilon_no_run_can_take_names_target_epsilon(epsilon):
    # before: "PrivacyConfig.epsilon must be a positive number" (not the argument given)
    with pytest.raises(ConfigError, match=r"^PrivacyEngine: target_epsilon must be a positive finite number"):
        _engine(target_epsilon=epsilon)


def test_a_target_delta_outside_0_1_names_target_delta():
    with pytest.raises(ConfigError, match=r"^PrivacyEngine: target_delta must be a number in \(0, 1\)"):
        _engine(target_delta=2.0)


def test_a_config_that_is_a_dict_is_one_line():
    # before: AttributeError: 'dict' object has no attribute 'performance' (at make_private)
    with pytest.raises(ConfigError, match=r"^PrivacyEngine: config= must be a raptor.TrainConfig .*got dict"):
        _engine(config={"method": "raptor"})


@pytest.mark.parametrize("model", [None, "minilm-moe"])
def test_a_model_that_is_not_a_module_names_model(model):
    # before: AttributeError: 'NoneType' / 'str' object has no attribute 'to'
    with pytest.raises(ConfigError, match=r"^make_private: model= must be a loaded torch model .*got "):
        _private(_engine(), model=model)


def test_a_module_without_moe_layers_names_model_and_the_way_out():
    # before: UnsupportedModelError: no MoE adapter for model_type None
    with pytest.raises(ConfigError, match=r"^make_private: model= is a Linear with no Hugging Face config .*"
                                          r"raptor upcycle"):
        _private(_engine(), model=torch.nn.Linear(4, 2))


def test_no_optimizer_names_optimizer():
    # before: AttributeError: 'NoneType' object has no attribute 'param_groups'
    engine = _engine()
    with pytest.raises(ConfigError, match=r"^make_private: optimizer= must be a torch.optim.Optimizer"):
        engine.make_private(model=tiny_model("olmoe"), optimizer=None, data_loader=ItemDataset(TRAIN))


def test_an_empty_dataset_names_the_data_loader():
    # before: "--batch-size 8 must be below the 0 private records" (a CLI flag, in a library call)
    empty = ItemDataset({k: v[:0] for k, v in TRAIN.items()})
    with pytest.raises(ConfigError, match=r"^make_private: data_loader holds no record"):
        _private(_engine(), data=empty)


def test_a_batch_size_above_the_records_names_the_engine_argument():
    with pytest.raises(ConfigError, match=r"^PrivacyEngine\(batch_size=...\) \(or config.batch_size\): the expected "
                                          r"batch size 100 must be below the 40 private records"):
        _private(_engine(batch_size=100))


def test_records_without_labels_are_refused_at_make_private():
    # before: make_private passed; the first loss.backward() raised "batch is missing 'labels'"
    no_labels = [{k: v for k, v in r.items() if k != "labels"} for r in ItemDataset(TRAIN)]
    with pytest.raises(ConfigError, match=r"^make_private: data_loader: its records lack labels"):
        _private(_engine(), data=no_labels)
