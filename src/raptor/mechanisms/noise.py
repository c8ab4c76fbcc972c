"""The Gaussian mechanism's noise: N(0, sigma^2 C^2 I) from an explicit generator.

Noise is always generated in float32 or float64 (never bf16/fp16: a low-precision noise buffer
has too few mantissa bits to represent the Gaussian's tails and rounds small draws), and cast to
the target's dtype only when it is added.

Privacy: the noise std is sigma * C, with sigma from the budget plan and C the group's clip norm,
both public. Nothing here depends on the data.
"""

from __future__ import annotations

import torch

from raptor.errors import ConfigError
from raptor.mechanisms.secure_rng import is_crypto_generator

_NOISE_DTYPES = (torch.float32, torch.float64)


def gaussian_noise(
    shape: torch.Size | tuple[int, ...],
    std: float,
    generator: torch.Generator,
    *,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """A tensor of i.i.d. N(0, std^2) draws of ``shape`` on the generator's device, in ``dtype``
    (float32 or float64 only). With an :class:`~raptor.mechanisms.secure_rng.AesCtrGenerator` the
    draws are formed in float64 from the AES stream (sum of 4 draws / 2) and cast to ``dtype``."""
    if dtype not in _NOISE_DTYPES:
        raise ConfigError(f"noise dtype must be float32 or float64, got {dtype}; cast only when adding")
    if not (std >= 0.0) or std == float("inf"):
        raise ConfigError(f"noise std must be finite and >= 0, got {std!r}")
    if is_crypto_generator(generator):  # secure mode: float64, Mironov mitigation, then cast
        return torch.zeros(tuple(shape), dtype=dtype, device=generator.device) if std == 0.0 \
            else generator.gaussian(tuple(shape), std, dtype=dtype)
    out = torch.empty(tuple(shape), dtype=dtype, device=generator.device)
    if std == 0.0:
        return out.zero_()
    return out.normal_(0.0, std, generator=generator)


def add_gaussian_noise_(
    target: torch.Tensor,
    noise_multiplier: float,
    clip_norm: float,
    generator: torch.Generator,
) -> torch.Tensor:
    """target += N(0, (noise_multiplier * clip_norm)^2 I), in place; returns ``target``.

    The draw is made in float64 if ``target`` is float64, else in float32, then cast to
    ``target.dtype``. A zero std still draws nothing and adds nothing.
    """
    if noise_multiplier < 0:
        raise ConfigError(f"noise_multiplier must be >= 0, got {noise_multiplier!r}")
    std = float(noise_multiplier) * float(clip_norm)
    if std == 0.0:
        return target
    dtype = torch.float64 if target.dtype == torch.float64 else torch.float32
    noise = gaussian_noise(target.shape, std, generator, dtype=dtype)
    return target.add_(noise.to(device=target.device, dtype=target.dtype))
