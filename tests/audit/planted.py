"""Bugs planted by monkeypatching (the real source is never edited), one function per row of
issue 24's table. Each takes pytest's ``monkeypatch`` and plants its bug for the test's duration."""

from __future__ import annotations

import torch

from raptor.training.step import release as release_module
from raptor.training.step import trainer as trainer_module


def _patch_release(mp, patched) -> None:
    """Replace release_gradients where it is looked up: release.py (the audits) and trainer.py."""
    mp.setattr(release_module, "release_gradients", patched)
    mp.setattr(trainer_module, "release_gradients", patched)


def expert_sigma_halved(mp):
    """release.py releases every expert group with sigma / 2 (the plan and ledger keep sigma)."""
    from dataclasses import replace

    real = release_module.release_gradients

    def patched(sums, slices_of, params, releases, generator):
        halved = [replace(r, sigma=r.sigma / 2.0) if r.stream == "expert" else r for r in releases]
        return real(sums, slices_of, params, halved, generator)

    _patch_release(mp, patched)


def experts_not_clipped(mp):
    """engine.py skips clipping for expert groups (their clip norm is treated as infinite)."""
    import math

    from raptor.per_sample.engine import PerRecordEngine

    real = PerRecordEngine.compute

    def patched(self, batch, clip_norms):
        return real(self, batch, {k: (math.inf if k.is_expert else c) for k, c in clip_norms.items()})

    mp.setattr(PerRecordEngine, "compute", patched)


def noise_divided(mp, factor: float = 1.5):
    """release.py adds noise of std sigma C / factor; the ledger keeps sigma."""
    real = release_module.add_gaussian_noise_

    def patched(target, noise_multiplier, clip_norm, generator):
        return real(target, noise_multiplier / factor, clip_norm, generator)

    mp.setattr(release_module, "add_gaussian_noise_", patched)


def ledger_records_more_sigma(mp, factor: float = 1.5):
    """PrivacyLedger.record stores factor x sigma (every claim made from a ledger drops)."""
    from raptor.accounting.ledger import PrivacyLedger

    real = PrivacyLedger.record

    def patched(self, sample_rate, noise_multiplier, *args, **kwargs):
        return real(self, sample_rate, noise_multiplier * factor, *args, **kwargs)

    mp.setattr(PrivacyLedger, "record", patched)


def release_reseeds(mp):
    """release_gradients draws from a generator re-seeded to 0 on every call (not the one passed in)."""
    real = release_module.release_gradients

    def patched(sums, slices_of, params, releases, generator):
        device = getattr(generator, "device", "cpu")
        return real(sums, slices_of, params, releases, torch.Generator(device=device).manual_seed(0))

    _patch_release(mp, patched)


def shared_noise_reused(mp):
    """The shared stream's noise is drawn once (per parameter shape) and added again at every later call."""
    from dataclasses import replace

    real = release_module.release_gradients
    cache: dict = {}

    def patched(sums, slices_of, params, releases, generator):
        shared = [r for r in releases if r.stream == "shared"]
        out = real(sums, slices_of, params, [r for r in releases if r.stream != "shared"], generator)
        silent = real(sums, slices_of, params, [replace(r, sigma=0.0) for r in shared], generator)
        names = list(silent)
        key = tuple((n, tuple(silent[n].shape)) for n in names)
        if key not in cache:
            noisy = real(sums, slices_of, params, shared, generator)
            cache[key] = {n: noisy[n] - silent[n] for n in names}
        for n in names:
            out[n] = silent[n] + cache[key][n]
        return out

    _patch_release(mp, patched)


def trainer_records_more_sigma(mp, factor: float = 1.5):
    """trainer.py records factor x the step's sigma in ITS ledger (the plan's own ledgers are right)."""
    from raptor.training.step.trainer import Trainer

    real_init = Trainer.__init__

    class Scaled:
        def __init__(self, inner):
            self._inner = inner

        def __getattr__(self, name):
            return getattr(self._inner, name)

        def __len__(self):
            return len(self._inner)

        def record(self, sample_rate, noise_multiplier, *args, **kwargs):
            return self._inner.record(sample_rate, noise_multiplier * factor, *args, **kwargs)

    def patched(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        if self.ledger is not None:
            self.ledger = Scaled(self.ledger)

    mp.setattr(Trainer, "__init__", patched)


def secure_gaussian_quartered(mp):
    """secure_rng.py divides the sum of four draws by 4 instead of 2 (std / 2)."""
    from raptor.mechanisms.secure_rng import AesCtrGenerator

    real = AesCtrGenerator.gaussian

    def patched(self, shape, std, dtype=torch.float64):
        return real(self, shape, std / 2.0, dtype)

    mp.setattr(AesCtrGenerator, "gaussian", patched)
