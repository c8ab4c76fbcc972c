"""Secure mode: the AES-256-CTR stream, float64 Gaussians with the sum-of-four mitigation, and its
plumbing behind GeneratorSpec into Poisson sampling, noise and the trainer.

The stream cannot be seeded (that is the point), so the distribution tests use large samples and
thresholds far in the tails (a false alarm is a < 1e-6 event).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import scipy.stats
import torch

from raptor.errors import ConfigError
from raptor.mechanisms import (
    AesCtrGenerator,
    GeneratorSpec,
    add_gaussian_noise_,
    gaussian_noise,
    poisson_sample,
)
from raptor.mechanisms import secure_rng as sr

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))


def test_uniforms_have_53_random_bits_and_the_right_moments():
    u = AesCtrGenerator().uniform(200_000)
    assert u.dtype == torch.float64 and float(u.min()) >= 0.0 and float(u.max()) < 1.0
    scaled = u * 2.0 ** 53
    assert torch.equal(scaled, scaled.round())                    # multiples of 2^-53
    assert bool((scaled.remainder(2.0 ** 21) != 0).any())          # low bits are used (not float32-like)
    assert scipy.stats.kstest(u.numpy(), "uniform").pvalue > 1e-6


def test_standard_normals_pass_a_ks_test_and_two_streams_differ():
    a, b = AesCtrGenerator(), AesCtrGenerator()
    z = a.standard_normal(100_001)
    assert z.shape == (100_001,) and z.dtype == torch.float64 and bool(torch.isfinite(z).all())
    assert scipy.stats.kstest(z.numpy(), "norm").pvalue > 1e-6
    assert not torch.equal(a.uniform(8), b.uniform(8))             # fresh key per generator
    assert "key" not in repr(a).lower()


def test_gaussian_is_the_sum_of_four_float64_draws_over_two(monkeypatch):
    calls = []
    real = AesCtrGenerator.standard_normal

    def counting(self, count):
        out = real(self, count)
        calls.append(out.clone())
        return out

    monkeypatch.setattr(AesCtrGenerator, "standard_normal", counting)
    x = AesCtrGenerator().gaussian((3, 5), 2.5, dtype=torch.float32)
    assert len(calls) == sr.MIRONOV_SUMMANDS == 4
    expected = (sum(calls) * 2.5 / 2.0).view(3, 5)                # formed in float64, then cast
    assert x.dtype == torch.float32
    torch.testing.assert_close(x, expected.float(), rtol=0, atol=0)


def test_secure_gaussian_has_the_claimed_std():
    x = AesCtrGenerator().gaussian((200_000,), 3.0)
    assert scipy.stats.kstest(x.numpy() / 3.0, "norm").pvalue > 1e-6


def test_mechanisms_take_the_secure_stream():
    g = AesCtrGenerator()
    sizes = torch.tensor([len(poisson_sample(400, 0.1, g)) for _ in range(300)], dtype=torch.float64)
    assert abs(sizes.mean().item() - 40.0) < 1.5                  # sd of the mean ~0.35
    noise = gaussian_noise((1000,), 0.5, g)
    assert noise.dtype == torch.float32 and 0.45 < float(noise.std()) < 0.55
    assert torch.equal(gaussian_noise((4,), 0.0, g), torch.zeros(4))
    target = torch.zeros(10_000, dtype=torch.float64)
    add_gaussian_noise_(target, 2.0, 0.5, g)
    assert 0.95 < float(target.std()) < 1.05


def test_generator_spec_routes_mechanisms_to_aes_unless_seeded():
    spec = GeneratorSpec()
    assert isinstance(spec.mechanism(0), AesCtrGenerator)
    assert isinstance(spec.make(0), torch.Generator)              # initialisation draws stay torch
    assert "secure" in spec.describe() and "AES" in spec.describe()
    seeded = GeneratorSpec(secure=False, seed=3)
    assert isinstance(seeded.mechanism(0), torch.Generator)
    assert "NOT secure" in seeded.describe()
    a, b = seeded.mechanism(1), GeneratorSpec(secure=False, seed=3).mechanism(1)
    assert torch.equal(torch.rand(4, generator=a), torch.rand(4, generator=b))  # seeded: reproducible
    assert isinstance(GeneratorSpec(source="torch").mechanism(0), torch.Generator)
    with pytest.raises(ConfigError, match="source"):
        GeneratorSpec(source="urandom")


def test_trainer_uses_the_secure_stream_by_default_and_labels_seeded_runs(tmp_path):
    from test_trainer_core import _trainer
    from toy_engine import toy_records

    secure = _trainer(toy_records(40), steps=1, secure=True)
    assert all(isinstance(g, AesCtrGenerator) for g in secure.generators.values())
    secure.run_steps(1)
    assert "secure" in secure.results()["randomness"]
    secure.save(tmp_path / "ck")
    assert not (tmp_path / "ck" / "rng.pt").exists()  # the final checkpoint of a secure run
    seeded = _trainer(toy_records(40), steps=1, secure=False)
    assert "NOT secure" in seeded.results()["randomness"]


def test_aes_ctr_state_continues_the_same_stream():
    """get_state/set_state (for a run's own mid-run checkpoints) continue the stream exactly, at
    any byte position, including inside a 16-byte AES block."""
    g = AesCtrGenerator()
    g.random_words(3)  # 24 bytes: half-way through a block
    state = g.get_state()
    expected = (g.gaussian((5,), 1.0), g.random_words(7), g.uniform(3))
    h = AesCtrGenerator()
    h.set_state(state)
    assert torch.equal(expected[0], h.gaussian((5,), 1.0)) and torch.equal(expected[1], h.random_words(7))
    assert torch.equal(expected[2], h.uniform(3))
    with pytest.raises(ConfigError, match="56 bytes"):
        h.set_state(torch.zeros(3, dtype=torch.uint8))
