"""Bad inputs of the Hugging Face ``Trainer`` path (``DPTrainer``, ``PrivacyArguments``): each is one
``ConfigError`` that names the argument as the user spelled it (``PrivacyArguments.target_epsilon``,
``TrainingArguments.per_device_train_batch_size``, ``train_dataset``) and says what to do, raised
when the trainer is made (before any update). Each case failed on the code before it: a traceback, a
silent fallback, or a message naming a CLI flag or another class's field (docs/ERRORS.md, the
Python API section)."""

from __future__ import annotations

import math

import pytest
from tiny import PUBLIC, TRAIN, ItemDataset, tiny_model
from transformers import TrainingArguments

from raptor.errors import ConfigError
from raptor.integrations.hf_trainer import DPTrainer, PrivacyArguments
from raptor.recipes import tiny_recipe

ITEMS, PUBLIC_ITEMS = list(ItemDataset(TRAIN)), list(ItemDataset(PUBLIC))


def _args(tmp_path, **kw) -> TrainingArguments:
    base = dict(output_dir=str(tmp_path / "hf"), per_device_train_batch_size=4, learning_rate=1e-3,
                report_to="none", save_strategy="no", use_cpu=True, disable_tqdm=True, max_steps=2,
                max_grad_norm=0.0)
    return TrainingArguments(**{**base, **kw})


def _privacy(**kw) -> PrivacyArguments:
    base = dict(batch_size=8, seed=0, public=PUBLIC_ITEMS, config=tiny_recipe("raptor", steps=2, batch_size=8))
    return PrivacyArguments(**{**base, **kw})


def _trainer(tmp_path, *, model="olmoe", train=None, privacy_args=None, **args_kw) -> DPTrainer:
    return DPTrainer(model=tiny_model(model) if isinstance(model, str) else model, args=_args(tmp_path, **args_kw),
                     train_dataset=ITEMS if train is None else train,
                     privacy_args=_privacy() if privacy_args is None else privacy_args)


@pytest.mark.parametrize("epsilon", [0, -1.0, math.nan, math.inf, "8"])
def test_a_target_epsilon_no_run_can_take_names_privacy_arguments(epsilon):
    # before: "PrivacyConfig.epsilon must be a positive number" (a class the user never touched); inf: accepted
    with pytest.raises(ConfigError, match=r"^PrivacyArguments: target_epsilon must be a positive finite number"):
        PrivacyArguments(target_epsilon=epsilon)


def test_a_target_delta_outside_0_1_names_privacy_arguments():
    with pytest.raises(ConfigError, match=r"^PrivacyArguments: target_delta must be a number in \(0, 1\)"):
        PrivacyArguments(target_delta=1.5)


def test_batch_size_zero_is_refused_not_replaced_by_the_device_batch():
    # before: silent: `batch_size or per_device_train_batch_size` trained at B=4
    with pytest.raises(ConfigError, match=r"^PrivacyArguments: batch_size must be an integer >= 1"):
        PrivacyArguments(batch_size=0)


def test_a_config_that_is_a_dict_is_one_line():
    # before: TypeError: must be called with a dataclass type or instance
    with pytest.raises(ConfigError, match=r"^PrivacyArguments: config= must be a raptor.TrainConfig .*got dict"):
        PrivacyArguments(config={"method": "raptor"})


def test_privacy_args_that_are_a_dict_are_one_line(tmp_path):
    # before: AttributeError: 'dict' object has no attribute 'method'
    with pytest.raises(ConfigError, match=r"^DPTrainer: privacy_args must be a raptor.integrations.PrivacyArguments"):
        _trainer(tmp_path, privacy_args={"target_epsilon": 4})


def test_no_model_is_refused_without_offering_model_init(tmp_path):
    # before: RuntimeError: `Trainer` requires either a `model` or `model_init` argument (model_init is refused)
    with pytest.raises(ConfigError, match=r"^DPTrainer: model= must be a loaded torch model") as err:
        _trainer(tmp_path, model=None)
    assert "model_init" not in str(err.value)


def test_an_empty_train_dataset_names_train_dataset(tmp_path):
    # before: "--batch-size 8 must be below the 0 private records" (a CLI flag, in a library call)
    with pytest.raises(ConfigError, match=r"^DPTrainer: train_dataset holds no record"):
        _trainer(tmp_path, train=[])


def test_a_batch_size_above_the_records_names_privacy_arguments_batch_size(tmp_path):
    with pytest.raises(ConfigError, match=r"^PrivacyArguments.batch_size: the expected batch size 100 must be below "
                                          r"the 40 private records"):
        _trainer(tmp_path, privacy_args=_privacy(batch_size=100))


def test_the_default_batch_size_names_the_training_arguments_field(tmp_path):
    with pytest.raises(ConfigError, match=r"^TrainingArguments.per_device_train_batch_size \(the default of "
                                          r"PrivacyArguments.batch_size\): the expected batch size 64"):
        _trainer(tmp_path, privacy_args=_privacy(batch_size=None), per_device_train_batch_size=64)


def test_records_without_labels_are_refused_when_the_trainer_is_made(tmp_path):
    # before: the trainer was made; train() failed at the first batch ("batch is missing 'labels'")
    no_labels = [{k: v for k, v in r.items() if k != "labels"} for r in ITEMS]
    with pytest.raises(ConfigError, match=r"^DPTrainer: train_dataset: its records lack labels \(a collated record "
                                          r"has attention_mask, input_ids\)"):
        _trainer(tmp_path, train=no_labels)


def test_empty_public_records_name_privacy_arguments(tmp_path):
    # before: "PrivacyEngine(public=...) holds no record" (the own-loop class, no way out)
    with pytest.raises(ConfigError, match=r"^DPTrainer: PrivacyArguments\(public=...\) holds no record; give"):
        _trainer(tmp_path, privacy_args=_privacy(public=[]))


def test_a_good_trainer_is_still_made(tmp_path):
    trainer = _trainer(tmp_path)
    assert trainer.privacy_engine.steps == 2
