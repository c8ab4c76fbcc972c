"""raptor.mechanisms: Poisson sampling and Gaussian noise, each from an explicit generator.

(Per-record clipping lives in the engine, :mod:`raptor.per_sample`, and its one-record oracle.)
"""

from raptor.mechanisms.noise import add_gaussian_noise_, gaussian_noise
from raptor.mechanisms.rng import (
    GeneratorSpec,
    secure_generator,
    seeded_generator,
)
from raptor.mechanisms.sampling import poisson_sample

__all__ = [
    "GeneratorSpec",
    "add_gaussian_noise_",
    "gaussian_noise",
    "poisson_sample",
    "secure_generator",
    "seeded_generator",
]
