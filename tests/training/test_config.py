"""Configs: validation messages, round trip, schedule, recipes."""

from __future__ import annotations

import json
import math

import pytest

from raptor.errors import ConfigError
from raptor.recipes import reference_recipe, tiny_recipe
from raptor.training.config import (
    OptimConfig,
    PerformanceConfig,
    PrivacyConfig,
    Schedule,
    TrainConfig,
)


def test_schedule_simultaneous_and_alternating():
    assert [Schedule().phase(t) for t in range(3)] == ["joint"] * 3
    s = Schedule((2, 1))
    assert [s.phase(t) for t in range(7)] == ["shared", "shared", "expert"] * 2 + ["shared"]
    assert Schedule.parse("3:2") == Schedule((3, 2))
    assert Schedule.parse(None) == Schedule() == Schedule.parse("simultaneous")
    with pytest.raises(ConfigError, match="S:X"):
        Schedule.parse("3-2")
    with pytest.raises(ConfigError, match="alternate"):
        Schedule((0, 1))


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: PrivacyConfig(epsilon=-1.0), "epsilon"),
        (lambda: PrivacyConfig(delta=1.0), "delta"),
        (lambda: PrivacyConfig(clip_shared=0.0), "clip_shared"),
        (lambda: PrivacyConfig(shared_ratio=1.0), "shared_ratio"),
        (lambda: PrivacyConfig(adjacency="swap"), "adjacency"),
        (lambda: PrivacyConfig(denominator="realized"), "denominator"),
        (lambda: PerformanceConfig(micro_batch_size=0), "micro_batch_size"),
        (lambda: PerformanceConfig(dtype="float16"), "dtype"),
        (lambda: OptimConfig(name="adam"), "name"),
        (lambda: OptimConfig(betas=(0.9, 1.0)), "betas"),
        (lambda: TrainConfig(method="dp-adam"), "method"),
        (lambda: TrainConfig(layers=(1, 1)), "layers"),
        (lambda: TrainConfig(batch_size=0), "batch_size"),
    ],
)
def test_validation_names_field_and_value(make, field):
    with pytest.raises(ConfigError, match=field):
        make()


def test_infinite_clip_needs_explicit_zero_noise():
    with pytest.raises(ConfigError, match="infinite clip"):
        PrivacyConfig(clip_shared=math.inf)
    PrivacyConfig(clip_shared=math.inf, clip_expert=math.inf, noise_multipliers=(0.0, 0.0))


def test_seed_means_seeded_mode_and_no_seed_needs_secure():
    assert tiny_recipe().privacy.secure_rng is False
    assert TrainConfig().privacy.secure_rng is True
    with pytest.raises(ConfigError, match="NOT secure"):
        TrainConfig(privacy=PrivacyConfig(secure_rng=False))
    # conflicting settings raise instead of being rewritten
    with pytest.raises(ConfigError, match="secure_rng"):
        TrainConfig(seed=0)


def test_nonprivate_has_no_epsilon_and_dp_methods_need_it():
    assert TrainConfig(method="nonprivate", privacy=PrivacyConfig(epsilon=None)).privacy.epsilon is None
    assert tiny_recipe("nonprivate").privacy.epsilon is None
    with pytest.raises(ConfigError, match="nonprivate method has no epsilon"):
        TrainConfig(method="nonprivate")
    with pytest.raises(ConfigError, match="needs privacy.epsilon"):
        TrainConfig(method="dpsgd", privacy=PrivacyConfig(epsilon=None))


def test_round_trip_through_json():
    cfg = tiny_recipe("raptor", layers=(0, 1), privacy=PrivacyConfig(schedule=Schedule((2, 3)), secure_rng=False))
    back = TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert back == cfg
    with pytest.raises(ConfigError, match="unknown fields"):
        TrainConfig.from_dict({**cfg.to_dict(), "bogus": 1})


def test_num_steps_and_recipes():
    assert TrainConfig(epochs=3.0, batch_size=1024).num_steps(67_000) == 66 * 3
    assert TrainConfig(steps=7).num_steps(10) == 7
    ref = reference_recipe()
    assert (ref.batch_size, ref.optim.lr, ref.privacy.epsilon, ref.privacy.shared_ratio) == (1024, 2e-4, 8.0, 0.3)
    assert reference_recipe("dpsgd", batch_size=64).batch_size == 64
