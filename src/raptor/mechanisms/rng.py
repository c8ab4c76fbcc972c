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

The mechanisms' draws (Poisson sampling and noise) come from :meth:`GeneratorSpec.mechanism`. In
secure mode that is, by default (``source="aes-ctr"``), an
:class:`~raptor.mechanisms.secure_rng.AesCtrGenerator`: a cryptographic AES-256-CTR stream keyed
from the OS CSPRNG, Gaussians formed in float64 with the sum-of-four-draws mitigation against
floating-point attacks (Mironov, CCS 2012; Opacus's secure mode). ``source="torch"`` keeps the
older behaviour: a torch generator (Mersenne Twister on CPU, Philox on CUDA) with an unpredictable
64-bit seed -- an unpredictable seed, not a cryptographic stream, and plain float Gaussians.
:meth:`GeneratorSpec.make` always returns a ``torch.Generator``: it is for draws that are not
privacy mechanisms (model and LoRA initialisation), which ``torch`` functions need.

Privacy: a generator's state determines the Poisson sample and the noise; saving or logging the
state of a secure generator voids the guarantee, so checkpoints of secure runs omit it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import torch

from raptor.errors import ConfigError
from raptor.mechanisms.secure_rng import AesCtrGenerator

#: Where secure mode's mechanism draws come from.
SOURCES = ("aes-ctr", "torch")


@dataclass(frozen=True)
class GeneratorSpec:
    """How a run's generators are made: ``secure=True`` (default) or a ``seed`` for a seeded run."""

    secure: bool = True
    seed: int | None = None
    source: str = "aes-ctr"  # secure mode's mechanism stream: "aes-ctr" (cryptographic) or "torch"

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ConfigError(f"GeneratorSpec.source must be one of {', '.join(SOURCES)}, got {self.source!r}")
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

    def mechanism(self, stream: int = 0, device: str | torch.device = "cpu"):
        """The generator of a privacy mechanism (Poisson sampling, noise) for one stream: an
        :class:`AesCtrGenerator` in secure mode with ``source="aes-ctr"``, else :meth:`make`'s."""
        if self.secure and self.source == "aes-ctr":
            return AesCtrGenerator(device)
        return self.make(stream, device)

    def describe(self) -> str:
        """One line for stdout and results.json saying whether the run's randomness is secure."""
        if not self.secure:
            return f"seeded torch generator (seed {self.seed}): reproducible, NOT secure"
        if self.source == "aes-ctr":
            return ("secure: AES-256-CTR stream keyed from the OS CSPRNG, float64 Gaussians "
                    "(sum of 4 draws / 2 against floating-point attacks)")
        return "OS-seeded torch generator: unpredictable seed, not a cryptographic stream"


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
