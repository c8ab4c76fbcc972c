"""raptor.mechanisms: Poisson sampling, Gaussian noise and clipping, each from an explicit generator."""

from raptor.mechanisms.clipping import clip_and_sum, clip_factors
from raptor.mechanisms.noise import add_gaussian_noise_, gaussian_noise
from raptor.mechanisms.rng import (
    GeneratorSpec,
    secure_generator,
    seeded_generator,
)
from raptor.mechanisms.sampling import poisson_sample
from raptor.mechanisms.secure_rng import AesCtrGenerator

__all__ = [
    "AesCtrGenerator",
    "GeneratorSpec",
    "add_gaussian_noise_",
    "clip_and_sum",
    "clip_factors",
    "gaussian_noise",
    "poisson_sample",
    "secure_generator",
    "seeded_generator",
]
