"""``raptor train --set PATH=VALUE`` reaches every setting without a flag of its own (the config's
fields and the command's data/model/run settings), converts the text by the field's declared type,
and refuses unknown paths, bad values and flagged settings in one line naming --set (or the flag)."""

from __future__ import annotations

import dataclasses

import pytest

from raptor.cli.flags import parse_sets, schema
from raptor.cli.main import build_parser, main
from raptor.cli.set_fields import leaf_fields
from raptor.cli.train import config_from_args
from raptor.training.config import TrainConfig


def leaf_paths(cls=TrainConfig):
    return {path: kind for path, (_, kind) in leaf_fields(cls).items()}


def _flagged(path):
    meta = schema()[path].metadata
    return bool(meta.get("flag") or meta.get("set_by"))


def _config(*flags):
    return config_from_args(build_parser().parse_args(["train", "--model", "switch_transformers", *flags]))


def _get(config, path):
    for part in path.split("."):
        config = getattr(config, part)
    return config


def _text(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return ",".join("none" if v is None else str(v) for v in value)
    return str(value)


# a value for each --set-only field, different from its default and valid for the config
VALUES = {"lora_alpha": 8.0, "lora_dropout": 0.1, "privacy.clip_quantile": 0.7, "privacy.pseudo_count": 0.5,
          "privacy.noise_multipliers": (1.5, 2.5), "performance.eval_batch_size": 17, "optim.betas": (0.8, 0.95),
          "optim.eps": 1e-6, "optim.weight_decay": 0.0, "optim.momentum": 0.5, "eval_every": 3, "freeze_head": True,
          "privacy.clip_expert": 2.0, "privacy.clip_rule": "median-ratio", "privacy.shared_ratio": 0.5,
          "privacy.accountant": "rdp", "privacy.adjacency": "replace-one", "privacy.denominator": "uniform",
          "privacy.schedule.alternate": (1, 2), "privacy.shared_split": "head", "performance.micro_batch_size": 7,
          "performance.memory_budget_mib": 64.0, "performance.dtype": "float64", "optim.name": "sgd",
          "optim.lr_expert": 0.01}
#: the same for the command's own settings (they land in the namespace the command reads)
SETTING_VALUES = {"data.hf_cache": "/tmp/hf", "data.task_type": "regression", "data.max_train_samples": 50,
                  "data.max_eval_samples": 20, "data.prompt_field": "q", "data.answer_field": "a",
                  "data.image_field": "img", "data.question_field": "ask", "model.tokenizer": "tok",
                  "model.vocab_size": 100, "model.hidden_size": 32, "model.num_layers": 3, "model.num_experts": 8,
                  "model.head_init": "label-words", "model.label_words": ("bad", "good"), "run.metric": ("f1",),
                  "run.checkpoint_every": 5, "run.max_new_tokens": 4, "run.freeze_shared_experts": True,
                  "run.distributed": True, "run.dist_backend": "gloo", "run.dist_timeout": 60.0}


def test_every_setting_has_a_flag_or_a_set_value_here():
    """A new setting is declared once; this test names it until it has a flag or a --set case."""
    every = schema()
    unreached = sorted(p for p in every if not _flagged(p) and p not in VALUES and p not in SETTING_VALUES)
    assert not unreached, f"a new setting needs a --set value in this test: {unreached}"


@pytest.mark.parametrize("path", sorted(SETTING_VALUES))
def test_set_reaches_the_command_setting(path):
    args = build_parser().parse_args(["train", "--model", "switch_transformers", "--set",
                                      f"{path}={_text(SETTING_VALUES[path])}"])
    config_from_args(args)
    assert getattr(args, path.split(".", 1)[1]) == SETTING_VALUES[path]


@pytest.mark.parametrize("path", sorted(VALUES))
def test_set_reaches_the_field_with_its_type(path):
    lora = ("--lora",) if path.startswith("lora_") else ()  # a LoRA setting needs a run with LoRA
    config = _config(*lora, "--set", f"{path}={_text(VALUES[path])}")
    assert _get(config, path) == VALUES[path] and _get(config, path) != _get(TrainConfig(), path)
    assert type(_get(config, path)) is type(VALUES[path])


@dataclasses.dataclass(frozen=True)
class _ThrowawayExtra:
    knob: float = 1.0
    switch: bool = False
    sizes: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class _ThrowawayConfig:
    extra: _ThrowawayExtra = dataclasses.field(default_factory=_ThrowawayExtra)
    level: int | None = None


def test_a_new_field_is_reachable_without_an_edit_of_the_cli():
    """A throwaway config, made in the test: --set parses and type-checks its fields by their types alone."""
    assert set(leaf_paths(_ThrowawayConfig)) == {"extra.knob", "extra.switch", "extra.sizes", "level"}
    assert parse_sets(["extra.knob=2.5", "extra.switch=true", "extra.sizes=1,2", "level=none"], config_cls=_ThrowawayConfig, settings={}) \
        == {"extra.knob": 2.5, "extra.switch": True, "extra.sizes": (1, 2), "level": None}
    from raptor.errors import ConfigError

    with pytest.raises(ConfigError, match="extra.knob=x: extra.knob takes a number"):
        parse_sets(["extra.knob=x"], config_cls=_ThrowawayConfig, settings={})


@pytest.mark.parametrize("item, message", [
    ("privacy.pseudo_count", r"--set 'privacy.pseudo_count': expected PATH=VALUE"),
    ("pseudo_count=1", r"--set pseudo_count: no such setting \(did you mean privacy.pseudo_count\?\)"),
    ("model.hidden_size=big", r"--set model.hidden_size=big: model.hidden_size takes an integer"),
    ("privacy.clip_rule=median", r"--set privacy.clip_rule=median: must be one of uniform"),
    ("privacy.shared_ratio=2", r"--set privacy.shared_ratio must be in \(0, 1\)"),
    ("run.metric=recall", r"--set run.metric=recall: must be of accuracy, f1"),
    ("data.task=sst2", r"--set data.task: this setting has its own flag; use --task"),
    ("optim.betas=0.9", r"--set optim.betas=0.9: optim.betas takes 2 comma-separated values"),
    ("optim.eps=small", r"--set optim.eps=small: optim.eps takes a number"),
    ("max_length=64", r"--set max_length: this setting has its own flag; use --max-length"),
    ("privacy.epsilon=1", r"--set privacy.epsilon: this setting has its own flag; use --epsilon"),
    ("privacy.secure_rng=false", r"--set privacy.secure_rng: this setting has its own flag; use --seed"),
    ("privacy.pseudo_count=", r"--set privacy.pseudo_count=: privacy.pseudo_count takes a number \(the value is empty\)"),
    ("lora_alpha=abc", r"--set lora_alpha=abc: lora_alpha takes a number \('abc' is not a number\)"),
    ("privacy.pseudo_count=inf", r"--set privacy.pseudo_count must be a positive finite number, got inf"),
    ("lora_alpha=32", r"--set lora_alpha: this run trains without LoRA .*pass --lora"),
])
def test_bad_sets_are_one_clear_line(item, message, tmp_path, capsys):
    assert main(["train", "--model", "switch_transformers", "--set", item, "--output-dir", str(tmp_path)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1 and __import__("re").search(message, err[0]), err


def test_a_set_value_the_config_refuses_names_the_field(tmp_path, capsys):
    assert main(["train", "--model", "switch_transformers", "--set", "privacy.pseudo_count=-1",
                 "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "pseudo_count" in err and "Traceback" not in err


def test_parse_sets_without_items_is_empty():
    assert parse_sets(None) == {} and parse_sets([]) == {}


def test_set_list_prints_every_set_path(capsys):
    assert main(["train", "--set", "list"]) == 0
    out = capsys.readouterr().out
    assert all(path in out for path in [*VALUES, *SETTING_VALUES])
    assert "privacy.epsilon" not in out  # a flag of its own



def test_a_setting_given_twice_is_refused(tmp_path, capsys):
    assert main(["train", "--model", "switch_transformers", "--lora", "--set", "lora_alpha=8", "--set", "lora_alpha=32",
                 "--output-dir", str(tmp_path)]) == 2
    assert "--set lora_alpha is given twice (8.0 and 32.0); give it once" in capsys.readouterr().err
