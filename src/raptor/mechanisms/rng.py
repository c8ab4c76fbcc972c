"""Random generators for the privacy mechanisms: a secure mode for real runs, a seeded mode for experiments.

Every random draw in raptor's mechanisms (Poisson sampling, Gaussian noise) takes an explicit
``torch.Generator``. This module makes them.

* :func:`secure_generator` seeds a ``torch.Generator`` with 64 bits drawn from the operating
  system's CSPRNG (:func:`secrets.randbits`, i.e. ``os.urandom``) at construction. Nobody,
  including the operator, can reproduce the sampling or the noise of such a run.
* :func:`seeded_generator` seeds it with a number you choose, so an experiment can be rerun
  exactly. **Seeded mode is not secure**: anyone who knows (or guesses) the seed can regenerate
  the batches and the noise and subtract it from the released model. Use it for experiments and
  tests only.

Limits of the secure mode, stated plainly: the seed is unpredictable, but the stream itself is
torch's generator (Mersenne Twister on CPU, Philox on CUDA), which is not a cryptographic stream
generator, and Gaussian samples in floating point are not an exact Gaussian (Mironov, CCS 2012).
Both limits are shared with the usual DP-SGD libraries; the first one means a generator's state
must be kept secret: a checkpoint of a run whose :class:`GeneratorSpec` is secure omits it.

Privacy: a generator's state determines the Poisson sample and the noise; saving or logging the
state of a secure generator voids the guarantee, so checkpoints of secure runs omit it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import torch

from raptor.errors import ConfigError


@dataclass(frozen=True)
class GeneratorSpec:
    """How a run's generators are made: ``secure=True`` (default) or a ``seed`` for a seeded run."""

    secure: bool = True
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.secure and self.seed is not None:
            raise ConfigError(
                f"GeneratorSpec: secure=True takes no seed (got seed={self.seed}); "
                "pass secure=False to run a reproducible, NOT secure, seeded experiment"
            )
        if not self.secure and (not isinstance(self.seed, int) or self.seed < 0):
            raise ConfigError(f"GeneratorSpec.seed must be an int >= 0 in seeded mode, got {self.seed!r}")

    def make(self, stream: int = 0, device: str | torch.device = "cpu") -> torch.Generator:
        """A generator for one stream (0, 1, ... give independent streams in seeded mode)."""
        if self.secure:
            return secure_generator(device)
        return seeded_generator(self.seed * 1_000_003 + stream, device)


def secure_generator(device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with 64 bits from the OS CSPRNG (``secrets``).

    Privacy: for real runs; keep its state out of logs and checkpoints.
    """
    gen = torch.Generator(device=device)
    gen.manual_seed(secrets.randbits(64))
    return gen


def seeded_generator(seed: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` seeded with ``seed``: reproducible, and NOT secure (see module doc)."""
    if not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be an int >= 0, got {seed!r}")
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen
