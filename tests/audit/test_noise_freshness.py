"""Noise freshness: every release draws new noise from the generator it is given.

The blind spots of the one-update mechanism audit (issue 24): a release that re-seeds its own
generator, or that reuses noise drawn once, looks like a correct single release. These tests fail
on each such planted bug (checked below with tests/audit/planted.py).
"""

from __future__ import annotations

import itertools

import planted
import pytest
import torch

from raptor.audit.trainer_loop import TrainerLoopAuditConfig, _run_once, _setup, _whitened
from raptor.mechanisms import AesCtrGenerator
from raptor.training.step import release as release_module


def _release_inputs():
    loop = _setup(TrainerLoopAuditConfig(steps=4))
    sums = loop.engine.compute(loop.records["in"], loop.plan.clip_norms).clipped_sums
    return loop, sums


def _release(loop, sums, generator):
    return release_module.release_gradients(sums, loop.engine.group_map.groups, loop.engine.group_map.params,
                                            loop.plan.step(0).groups, generator)


def test_two_releases_of_the_same_inputs_differ():
    loop, sums = _release_inputs()
    gen = torch.Generator().manual_seed(5)
    a, b = _release(loop, sums, gen), _release(loop, sums, gen)
    assert a.keys() == b.keys() and a
    for name in a:
        assert not torch.equal(a[name], b[name]), name
    aes = AesCtrGenerator()
    a, b = _release(loop, sums, aes), _release(loop, sums, aes)
    assert all(not torch.equal(a[n], b[n]) for n in a)


def test_the_generator_passed_in_is_the_one_that_advances():
    loop, sums = _release_inputs()
    gen = torch.Generator().manual_seed(7)
    twin = torch.Generator().manual_seed(7)
    global_state = torch.get_rng_state()
    before = gen.get_state()
    a = _release(loop, sums, gen)
    assert not torch.equal(gen.get_state(), before)              # it advanced
    assert torch.equal(torch.get_rng_state(), global_state)      # the global generator did not
    b = _release(loop, sums, twin)                               # same state -> same noise: it came from gen
    assert all(torch.equal(a[n], b[n]) for n in a)
    aes = AesCtrGenerator()
    state = aes.get_state()
    _release(loop, sums, aes)
    assert not torch.equal(aes.get_state(), state)


def _step_noises(loop, generators):
    """Each step's whitened release minus its best-fitting noiseless mean (world {b})."""
    released, _ = _run_once(loop, "out", generators)
    a = torch.cat([loop.contrib["b"][k] / loop.std[k] for k in loop.std])
    out = []
    for r in released:
        y = torch.cat(list(_whitened(loop, r).values()))
        out.append(min((y - i * a for i in (0, 1)), key=lambda v: float(v.pow(2).sum())))
    return out


def _assert_no_step_repeats(loop, generators):
    noises = _step_noises(loop, generators)
    dim = noises[0].numel()
    for s, t in itertools.combinations(range(len(noises)), 2):
        # fresh noise: ||n_s - n_t||^2 ~ 2 dim; a repeated stream makes it (close to) 0 for its coordinates
        assert float((noises[s] - noises[t]).pow(2).sum()) > dim, (s, t)
    per_stream = {}
    for stream in ("shared", "expert"):
        keys = [g.key for g in loop.plan.groups if g.stream == stream]
        idx = torch.cat([torch.full((loop.contrib["b"][k].numel(),), k in keys) for k in loop.std])
        per_stream[stream] = [n[idx] for n in noises]
        for s, t in itertools.combinations(range(len(noises)), 2):
            d = per_stream[stream][s] - per_stream[stream][t]
            assert float(d.pow(2).sum()) > 0.5 * d.numel(), (stream, s, t)


def test_no_step_of_the_trainer_repeats_another_steps_noise():
    loop = _setup(TrainerLoopAuditConfig(steps=4))
    gens = {"sample": torch.Generator().manual_seed(1), "noise": torch.Generator().manual_seed(2)}
    _assert_no_step_repeats(loop, gens)
    _assert_no_step_repeats(loop, gens)    # a second run with the same (advanced) generators: new noise


@pytest.mark.parametrize("plant", [planted.release_reseeds, planted.shared_noise_reused])
def test_the_freshness_checks_fail_on_repeated_noise(plant, monkeypatch):
    loop = _setup(TrainerLoopAuditConfig(steps=4))
    plant(monkeypatch)
    gens = {"sample": torch.Generator().manual_seed(1), "noise": torch.Generator().manual_seed(2)}
    with pytest.raises(AssertionError):
        _assert_no_step_repeats(loop, gens)
