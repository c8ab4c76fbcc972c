"""Poisson sampling, Gaussian noise and generators."""

from __future__ import annotations

import pytest
import torch

from raptor.errors import ConfigError
from raptor.mechanisms import (
    GeneratorSpec,
    add_gaussian_noise_,
    gaussian_noise,
    poisson_sample,
    secure_generator,
    seeded_generator,
)


def test_poisson_sample_matches_definition_with_the_same_generator():
    g1, g2 = seeded_generator(3), seeded_generator(3)
    idx = poisson_sample(1000, 0.1, g1)
    u = torch.rand(1000, generator=g2, dtype=torch.float64)
    assert torch.equal(idx, torch.nonzero(u < 0.1).flatten())
    assert idx.dtype == torch.int64


def test_poisson_sample_rate_and_possibly_empty():
    g = seeded_generator(0)
    sizes = torch.tensor([len(poisson_sample(200, 0.05, g)) for _ in range(400)], dtype=torch.float64)
    assert abs(sizes.mean().item() - 10.0) < 1.0           # E|S| = qN = 10 (sd of mean ~0.16)
    assert abs(sizes.var().item() - 200 * 0.05 * 0.95) < 3.0  # binomial variance 9.5
    tiny = [len(poisson_sample(5, 0.01, g)) for _ in range(200)]
    assert 0 in tiny                                          # empty samples happen and are returned


def test_poisson_sample_advances_generator_identically_whatever_the_outcome():
    # Same number of draws per step: the generator state after a step does not depend on |S|.
    g_lo, g_hi = seeded_generator(5), seeded_generator(5)
    poisson_sample(50, 0.001, g_lo)
    poisson_sample(50, 0.999, g_hi)
    assert torch.equal(g_lo.get_state(), g_hi.get_state())


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, float("nan")])
def test_poisson_sample_rejects_bad_rate(bad):
    with pytest.raises(ConfigError, match="sample_rate"):
        poisson_sample(10, bad, seeded_generator(0))


def test_gaussian_noise_statistics_and_dtype():
    g = seeded_generator(1)
    x = gaussian_noise((200_000,), 2.5, g)
    assert x.dtype == torch.float32
    assert abs(x.mean().item()) < 0.03
    assert abs(x.std().item() - 2.5) < 0.03
    assert gaussian_noise((4,), 0.0, g).abs().sum() == 0


def test_gaussian_noise_refuses_low_precision_buffers():
    with pytest.raises(ConfigError, match="float32 or float64"):
        gaussian_noise((3,), 1.0, seeded_generator(0), dtype=torch.bfloat16)


def test_add_noise_draws_in_float32_and_casts_when_adding():
    target = torch.zeros(1000, dtype=torch.bfloat16)
    add_gaussian_noise_(target, 2.0, 0.5, seeded_generator(7))
    ref = torch.empty(1000, dtype=torch.float32).normal_(0.0, 1.0, generator=seeded_generator(7))
    assert torch.equal(target, ref.to(torch.bfloat16))
    t64 = torch.zeros(10, dtype=torch.float64)
    add_gaussian_noise_(t64, 1.0, 1.0, seeded_generator(7))
    ref64 = torch.empty(10, dtype=torch.float64).normal_(0.0, 1.0, generator=seeded_generator(7))
    assert torch.equal(t64, ref64)


def test_seeded_generators_reproduce_and_secure_ones_differ():
    a, b = GeneratorSpec(secure=False, seed=4).make(1), GeneratorSpec(secure=False, seed=4).make(1)
    assert torch.equal(torch.rand(5, generator=a), torch.rand(5, generator=b))
    c = GeneratorSpec(secure=False, seed=4).make(2)
    assert not torch.equal(torch.rand(5, generator=a), torch.rand(5, generator=c))
    s1, s2 = secure_generator(), secure_generator()
    assert not torch.equal(torch.rand(8, generator=s1), torch.rand(8, generator=s2))


def test_generator_spec_validation():
    with pytest.raises(ConfigError, match="secure=True takes no seed"):
        GeneratorSpec(secure=True, seed=1)
    with pytest.raises(ConfigError, match="seed"):
        GeneratorSpec(secure=False, seed=None)


