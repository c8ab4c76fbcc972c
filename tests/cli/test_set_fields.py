"""``raptor train --set FIELD=VALUE`` reaches every config field without a flag of its own, converts
the text by the field's declared type, and refuses unknown fields, bad values and flagged fields in
one line naming --set (or the flag)."""

from __future__ import annotations

import dataclasses

import pytest

from raptor.cli.main import build_parser, main
from raptor.cli.set_fields import FLAGGED, leaf_paths, parse_sets
from raptor.cli.train import config_from_args
from raptor.training.config import TrainConfig


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
          "optim.eps": 1e-6, "optim.weight_decay": 0.0, "optim.momentum": 0.5}


def test_every_field_has_a_flag_or_a_set_path():
    paths = leaf_paths()
    assert set(paths) == set(FLAGGED) & set(paths) | set(VALUES), \
        f"a new config field needs a flag or a --set value here: {sorted(set(paths) - set(FLAGGED) - set(VALUES))}"
    assert all(path in paths or "." not in path for path in FLAGGED if path not in ("objective", "freeze_shared_experts"))


@pytest.mark.parametrize("path", sorted(VALUES))
def test_set_reaches_the_field_with_its_type(path):
    config = _config("--set", f"{path}={_text(VALUES[path])}")
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
    assert parse_sets(["extra.knob=2.5", "extra.switch=true", "extra.sizes=1,2", "level=none"], cls=_ThrowawayConfig) \
        == {"extra.knob": 2.5, "extra.switch": True, "extra.sizes": (1, 2), "level": None}
    from raptor.errors import ConfigError

    with pytest.raises(ConfigError, match="extra.knob=x: not a value of its type"):
        parse_sets(["extra.knob=x"], cls=_ThrowawayConfig)


@pytest.mark.parametrize("item, message", [
    ("privacy.pseudo_count", r"--set 'privacy.pseudo_count': expected FIELD=VALUE"),
    ("pseudo_count=1", r"--set pseudo_count: no such config field \(did you mean privacy.pseudo_count\?\)"),
    ("optim.betas=0.9", r"--set optim.betas=0.9: not a value of its type .*needs 2 comma-separated values"),
    ("optim.eps=small", r"--set optim.eps=small: not a value of its type"),
    ("max_length=64", r"--set max_length: this field has its own flag; use --max-length"),
    ("privacy.epsilon=1", r"--set privacy.epsilon: this field has its own flag; use --epsilon"),
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
