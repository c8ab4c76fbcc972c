"""The per-step release: noisy, publicly normalised gradients per group (METHOD.md, step 5).

For every group g released at a step, with clipped sum S_g (from the engine, over the Poisson
sample), clip norm C_g, noise multiplier sigma_g and PUBLIC denominator n_hat_g:

    grad_g = (S_g + N(0, sigma_g^2 C_g^2 I)) / n_hat_g

* shared / dense group: n_hat = B (the expected batch size, public);
* expert (l, e): n_hat = B pi_hat_{l,e} (public owner share) or B / E_l (uniform), for EVERY expert
  of every trained layer, whether or not any of its owners was sampled (a noise-only update).
  n_hat is not computed here: it is set up once before training
  (:func:`raptor.roles.public_stats.group_denominators`, called by the public stage) and reaches
  each step in its :class:`GroupRelease`; the report shows the same numbers.

Each group's (and each fused-weight slice's) noise is an independent draw from the explicit
generator, made in float32 (float64 for float64 params) and cast when added. The draw order is
fixed (groups in plan order, slices in group order), so a seeded run is reproducible. The release
of a bf16/fp16 parameter is kept in float32 (``sum_dtype``): sum, noise and division are never
rounded to 8 mantissa bits; the optimizer's float32 master weights take it as it is
(:mod:`raptor.training.step.master_weights`).

Which groups are released at update t, and with which sigma_g, is stated by the step plan
(:mod:`raptor.training.step.plan`); this module only executes one step's list.

Privacy: nothing here reads the sample size, the owner counts or any other statistic of the
private batch: the only private input is the clipped sums, which are what the Gaussian mechanism
releases. Denominators, clip norms and sigmas are public.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from raptor.errors import ConfigError
from raptor.mechanisms import add_gaussian_noise_

STREAMS: tuple[str, ...] = ("shared", "expert")


def stream_of(key) -> str:
    """The stream a group belongs to: "expert" for expert (l, e) groups, "shared" otherwise (shared, dense)."""
    return "expert" if getattr(key, "is_expert", False) else "shared"


@dataclass(frozen=True)
class GroupRelease:
    """How one group is released: stream, clip norm C_g, noise multiplier sigma_g, public n_hat_g.

    ``sigma`` must be planned: a number >= 0 (0 only in an explicit zero-noise or non-private plan).
    """

    key: object          # a raptor.roles.groups.GroupKey
    stream: str
    clip_norm: float
    sigma: float
    denominator: float

    def __post_init__(self) -> None:
        if self.stream not in STREAMS:
            raise ConfigError(f"GroupRelease.stream must be 'shared' or 'expert', got {self.stream!r}")
        if not self.clip_norm > 0:
            raise ConfigError(f"GroupRelease.clip_norm for {self.key} must be > 0, got {self.clip_norm!r}")
        if isinstance(self.sigma, bool) or not isinstance(self.sigma, (int, float)) or not self.sigma >= 0:
            raise ConfigError(f"group {self.key} (stream {self.stream!r}) is released without a planned noise "
                              f"multiplier: sigma={self.sigma!r}; plan the stream (or use the nonprivate plan)")
        if self.sigma > 0 and math.isinf(self.clip_norm):
            raise ConfigError(f"group {self.key}: noise with an infinite clip norm has no finite scale")
        if not (self.denominator > 0 and math.isfinite(self.denominator)):
            raise ConfigError(f"GroupRelease.denominator for {self.key} must be finite and > 0, got {self.denominator!r}")

    @property
    def noise_std(self) -> float:
        """Std of each released coordinate's noise after normalisation: sigma_g C_g / n_hat_g."""
        return 0.0 if self.sigma == 0 else self.sigma * self.clip_norm / self.denominator

    def to_dict(self) -> dict:
        return {"stream": self.stream, "clip_norm": self.clip_norm, "sigma": self.sigma,
                "denominator": self.denominator}


def release_gradients(
    clipped_sums: Mapping[str, torch.Tensor],
    slices_of: Mapping[object, Sequence],
    params: Mapping[str, torch.nn.Parameter],
    releases: Sequence[GroupRelease],
    generator: torch.Generator,
) -> dict[str, torch.Tensor]:
    """Noisy normalised gradients {param name: tensor} for the groups in ``releases`` (one step's
    list from the step plan, each with its own sigma_g).

    ``slices_of[key]`` lists the group's ``ParamSlice``s (``name``, ``index``: dim-0 slot of a fused
    weight or None for the whole parameter); ``params`` maps names to parameters (for shapes and
    dtypes); a parameter absent from ``clipped_sums`` has a zero sum (e.g. an empty sample).
    """
    from raptor.per_sample.norms import sum_dtype  # here: importing raptor.per_sample loads transformers

    out: dict[str, torch.Tensor] = {}
    for rel in releases:
        for sl in slices_of[rel.key]:
            if sl.name not in out:
                p = params[sl.name]
                s = clipped_sums.get(sl.name)
                wide = sum_dtype(p)  # float32 for bf16/fp16 params: noise and division before any rounding
                out[sl.name] = torch.zeros_like(p, dtype=wide) if s is None else s.detach().to(wide).clone()
            view = out[sl.name] if sl.index is None else out[sl.name][sl.index]
            if rel.sigma > 0:
                add_gaussian_noise_(view, rel.sigma, rel.clip_norm, generator)
            view.div_(rel.denominator)
    return out
