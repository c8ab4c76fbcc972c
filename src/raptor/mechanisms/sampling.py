"""Poisson sampling: each record joins the step's sample independently with probability q.

S_t = {i : U_i < q}, U_i ~ Uniform[0, 1) i.i.d. from an explicit generator. |S_t| is random and
may be 0; the batch size B = qN is only its expectation. This is the sampling that the
subsampled-Gaussian accounting assumes; shuffling into fixed-size batches is a different
mechanism and must not be accounted as Poisson.

Privacy: the realized sample (and its size) is private. Callers may use it only to compute the
clipped sums of the sampled records; nothing may branch on, scale by, log or save its size.
"""

from __future__ import annotations

import torch

from raptor.errors import ConfigError
from raptor.mechanisms.secure_rng import is_crypto_generator


def poisson_sample(num_records: int, sample_rate: float, generator) -> torch.Tensor:
    """Indices (int64, increasing, on the CPU) of the records in one Poisson sample.

    One uniform draw per record, always ``num_records`` draws whatever the outcome, so the
    generator advances by the same amount every step. ``generator`` is a ``torch.Generator`` or an
    :class:`~raptor.mechanisms.secure_rng.AesCtrGenerator` (secure mode).
    """
    if not isinstance(num_records, int) or num_records < 1:
        raise ConfigError(f"num_records must be a positive int, got {num_records!r}")
    if not 0.0 < sample_rate <= 1.0:
        raise ConfigError(f"sample_rate must be in (0, 1], got {sample_rate!r}")
    if is_crypto_generator(generator):
        u_N = generator.uniform(num_records)  # float64, 53 random bits each, CPU
    else:
        u_N = torch.rand(num_records, generator=generator, dtype=torch.float64, device=generator.device)
    return torch.nonzero(u_N < sample_rate, as_tuple=False).flatten().cpu()
