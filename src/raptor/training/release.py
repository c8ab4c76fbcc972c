"""The per-step release: noisy, publicly normalised gradients per group (METHOD.md, step 5).

For every group g released at this step, with clipped sum S_g (from the engine, over the Poisson
sample), clip norm C_g, stream noise multiplier sigma and PUBLIC denominator n_g:

    grad_g = (S_g + N(0, sigma^2 C_g^2 I)) / n_g

* shared / dense group: n = B (the expected batch size, public);
* expert (l, e): n = B pi_hat_{l,e} (public owner share) or B / E_l (uniform), for EVERY expert
  of every trained layer, whether or not any of its owners was sampled (a noise-only update).

Each group's (and each fused-weight slice's) noise is an independent draw from the explicit
generator, made in float32 (float64 for float64 params) and cast when added. The draw order is
fixed (groups in map order, slices in group order), so a seeded run is reproducible.

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


@dataclass(frozen=True)
class GroupRelease:
    """How one group is released: its stream ("shared" or "expert"), clip norm and public denominator."""

    key: object          # a raptor.roles.groups.GroupKey
    stream: str
    clip_norm: float
    denominator: float

    def __post_init__(self) -> None:
        if self.stream not in ("shared", "expert"):
            raise ConfigError(f"GroupRelease.stream must be 'shared' or 'expert', got {self.stream!r}")
        if not self.clip_norm > 0:
            raise ConfigError(f"GroupRelease.clip_norm for {self.key} must be > 0, got {self.clip_norm!r}")
        if not (self.denominator > 0 and math.isfinite(self.denominator)):
            raise ConfigError(f"GroupRelease.denominator for {self.key} must be finite and > 0, got {self.denominator!r}")


def release_gradients(
    clipped_sums: Mapping[str, torch.Tensor],
    slices_of: Mapping[object, Sequence],
    params: Mapping[str, torch.nn.Parameter],
    releases: Sequence[GroupRelease],
    noise_multipliers: Mapping[str, float],
    generator: torch.Generator,
) -> dict[str, torch.Tensor]:
    """Noisy normalised gradients {param name: tensor} for the groups in ``releases``.

    ``slices_of[key]`` lists the group's ``ParamSlice``s (``name``, ``index``: dim-0 slot of a fused
    weight or None for the whole parameter); ``params`` maps names to parameters (for shapes and
    dtypes); a parameter absent from ``clipped_sums`` has a zero sum (e.g. an empty sample).
    ``noise_multipliers[stream]`` is sigma of that stream at this step.
    """
    out: dict[str, torch.Tensor] = {}
    for rel in releases:
        sigma = float(noise_multipliers[rel.stream])
        if sigma > 0 and math.isinf(rel.clip_norm):
            raise ConfigError(f"group {rel.key}: noise with an infinite clip norm has no finite scale")
        for sl in slices_of[rel.key]:
            if sl.name not in out:
                p = params[sl.name]
                s = clipped_sums.get(sl.name)
                out[sl.name] = torch.zeros_like(p) if s is None else s.detach().to(p.dtype).clone()
            view = out[sl.name] if sl.index is None else out[sl.name][sl.index]
            if sigma > 0:
                add_gaussian_noise_(view, sigma, rel.clip_norm, generator)
            view.div_(rel.denominator)
    return out


@dataclass(frozen=True)
class StreamSetup:
    """Everything public the trainer needs about the released groups, fixed before training.

    ``releases`` lists every group of the engine's group map with its stream, clip norm and
    denominator; ``public_report`` carries the public statistics behind them (layer table, shares)
    for results.json.
    """

    grouping: str
    trained_layers: tuple[int, ...]
    releases: tuple[GroupRelease, ...]
    public_report: dict
    empty_groups: tuple = ()

    @property
    def clip_norms(self) -> dict:
        """{GroupKey: C_g} as the engine takes them (groups with no trainable slice get 1.0: they
        contribute nothing and are never released)."""
        table = {key: 1.0 for key in self.empty_groups}
        table.update({r.key: r.clip_norm for r in self.releases})
        return table

    def streams(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.stream for r in self.releases))

    def active(self, phase: str) -> tuple[GroupRelease, ...]:
        """Groups released at a step of ``phase`` ("joint" = all, "shared"/"expert" = that stream)."""
        return tuple(r for r in self.releases if phase in ("joint", r.stream))

    def to_dict(self) -> dict:
        return {
            "grouping": self.grouping,
            "trained_layers": list(self.trained_layers),
            "groups": {str(r.key): {"stream": r.stream, "clip_norm": r.clip_norm, "denominator": r.denominator}
                       for r in self.releases},
            "public": self.public_report,
        }


def build_stream_setup(
    groups: Mapping[object, Sequence],
    *,
    grouping: str,
    trained_layers: Sequence[int],
    batch_size: int,
    shares: Mapping[int, Sequence[float]] | None,
    denominator: str,
    clip_shared: float,
    clip_experts: Mapping[object, float] | float,
    public_report: dict | None = None,
) -> StreamSetup:
    """The release of every non-empty group: the shared/dense group in stream "shared" with
    denominator B; expert (l, e) in stream "expert" with n_hat = B pi_hat_{l,e} ("public") or B / E_l
    ("uniform"). ``shares[l]`` are the smoothed PUBLIC owner shares of layer l.

    Privacy: every input is public (group structure, B, public shares, clip norms).
    """
    if denominator not in ("public", "uniform"):
        raise ConfigError(f"denominator must be 'public' or 'uniform', got {denominator!r}")
    experts_per_layer: dict[int, int] = {}
    for key in groups:
        if getattr(key, "is_expert", False):
            experts_per_layer[key.layer] = experts_per_layer.get(key.layer, 0) + 1
    releases = []
    empty = []
    for key, slices in groups.items():
        if not slices:
            empty.append(key)
            continue
        if not getattr(key, "is_expert", False):
            releases.append(GroupRelease(key, "shared", float(clip_shared), float(batch_size)))
            continue
        if denominator == "uniform":
            n_hat = batch_size / experts_per_layer[key.layer]
        else:
            if shares is None or key.layer not in shares:
                raise ConfigError(f"public denominator needs the public owner shares of layer {key.layer}")
            n_hat = batch_size * float(shares[key.layer][key.expert_id])
        c = clip_experts if isinstance(clip_experts, (int, float)) else clip_experts[key]
        releases.append(GroupRelease(key, "expert", float(c), float(n_hat)))
    return StreamSetup(grouping=grouping, trained_layers=tuple(trained_layers), releases=tuple(releases),
                       public_report=public_report or {}, empty_groups=tuple(empty))
