"""Routing statistics of the PUBLIC corpus: owner shares, entropy, chi^2, and the estimator's bias
and variance per MoE layer; per-expert clip norms from public gradient norms.

Every function here takes public inputs only (owner assignments or gradient norms measured on the
public corpus). None of them may be called on the private training set: a statistic of the
private set is a release that the privacy ledger does not account for.

Legend: N public records, E experts of one layer.

The estimator (METHOD.md, "Choosing the layer to protect"). Expert (l, e) of a trained layer
releases  u_e = (sum_{i in S, o(x_i)=e} gbar_i + N(0, sigma_e^2 C_e^2 I)) / n_hat_e.
With Poisson rate q and N_e private owners of e, E[u_e] = (q N_e / n_hat_e) mu_e where mu_e is the
mean clipped owner gradient. Writing pi_e = N_e / N for the (private, unknown) owner share and
B = qN:

* public denominator n_hat_e = B pi_hat_e:  E[u_e] = (pi_e / pi_hat_e) mu_e, bias factor
  pi_e / pi_hat_e; it is 1 when the public shares equal the private ones;
* uniform denominator n_hat_e = B / E:      E[u_e] = E pi_e mu_e, bias factor E pi_e; its
  load-averaged squared mis-scaling (1/E) sum_e (E pi_e - 1)^2 = E sum_e pi_e^2 - 1 is the chi^2
  distance of the shares to uniform, ~ 2 (log E - H) near uniform;
* noise variance per coordinate-sum: Var = sigma_e^2 C_e^2 d_e / n_hat_e^2 (d_e = parameters of
  expert e), plus the sampling variance of the Poisson sum. A low-load expert (small pi_hat_e)
  has a large noise variance: balanced routing (high entropy) keeps every n_hat_e large.

The bias of the public denominator cannot be measured without the private shares; as a public
proxy :func:`split_half_bias` measures how much the shares of one half of the public corpus
mis-scale the other half.

n_hat is computed here and nowhere else: :func:`denominators` for the experts of one layer, and
:func:`group_denominators` for every group key of a run (B for the shared/dense groups), which the
public stage (:mod:`raptor.training.setup.public_stage`) calls once before training; the per-step
release (:mod:`raptor.training.step.release`) only divides by those numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import torch

from raptor.errors import ConfigError

#: Default additive pseudo-count per expert in :func:`owner_shares`.
DEFAULT_PSEUDO_COUNT = 1.0


def _check_owners(owner_N: torch.Tensor, num_experts: int) -> torch.Tensor:
    if num_experts < 1:
        raise ConfigError(f"num_experts must be >= 1, got {num_experts}")
    owner_N = torch.as_tensor(owner_N).reshape(-1).long()
    if owner_N.numel() and (owner_N.min() < 0 or owner_N.max() >= num_experts):
        raise ConfigError(
            f"owner ids must lie in [0, {num_experts}), got range "
            f"[{int(owner_N.min())}, {int(owner_N.max())}]"
        )
    return owner_N


def owner_counts(owner_N: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Number of public records owned by each expert, float64 [E].

    Privacy: public corpus only.
    """
    owner_N = _check_owners(owner_N, num_experts)
    return torch.bincount(owner_N, minlength=num_experts).double()


def empirical_shares(owner_N: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Raw public owner shares counts_e / N, float64 [E] (uniform if there are no records).

    Privacy: public corpus only.
    """
    counts_E = owner_counts(owner_N, num_experts)
    total = counts_E.sum()
    if total == 0:
        return torch.full((num_experts,), 1.0 / num_experts, dtype=torch.float64)
    return counts_E / total


def owner_shares(owner_N: torch.Tensor, num_experts: int, pseudo_count: float = DEFAULT_PSEUDO_COUNT) -> torch.Tensor:
    """Smoothed public owner shares pi_hat_e = (count_e + a) / (N + a E), float64 [E].

    The smoothing floor: with pseudo-count a > 0 every share is >= a / (N + a E) > 0, so every
    public denominator n_hat_e = B pi_hat_e is positive even for an expert that owns no public
    record; such an expert's release is then mostly noise scaled by a large 1/n_hat_e, which the
    per-layer variance report makes visible. Shares sum to 1.

    Privacy: public corpus only.
    """
    if not pseudo_count > 0:
        raise ConfigError(f"pseudo_count must be > 0 so that no n_hat_e is 0, got {pseudo_count!r}")
    counts_E = owner_counts(owner_N, num_experts)
    return (counts_E + pseudo_count) / (counts_E.sum() + pseudo_count * num_experts)


def routing_entropy(shares_E: torch.Tensor) -> float:
    """H = -sum_e pi_e log pi_e in nats (0 log 0 = 0); log E for uniform shares, 0 for one expert.

    Privacy: public corpus only.
    """
    p = torch.as_tensor(shares_E, dtype=torch.float64)
    nz = p[p > 0]
    return float(-(nz * nz.log()).sum())


def chi2_to_uniform(shares_E: torch.Tensor) -> float:
    """E sum_e pi_e^2 - 1: the chi^2 distance to uniform, = the load-averaged squared
    mis-scaling (1/E) sum_e (E pi_e - 1)^2 of the uniform denominator B/E.

    Privacy: public corpus only.
    """
    p = torch.as_tensor(shares_E, dtype=torch.float64)
    return float(p.numel() * (p * p).sum() - 1.0)


def denominators(batch_size: float, shares_E: torch.Tensor, kind: str = "public") -> torch.Tensor:
    """n_hat_e per expert: B pi_hat_e ("public") or B / E ("uniform"), float64 [E].

    Privacy: public corpus only (B and pi_hat are public; nothing here sees the realized batch).
    """
    p = torch.as_tensor(shares_E, dtype=torch.float64)
    if kind == "public":
        if (p <= 0).any():
            raise ConfigError("public shares must be > 0 (use owner_shares with a pseudo-count)")
        return batch_size * p
    if kind == "uniform":
        return torch.full_like(p, batch_size / p.numel())
    raise ConfigError(f"denominator kind must be 'public' or 'uniform', got {kind!r}")


def group_denominators(
    groups: Sequence[object], *, batch_size: int, shares: Mapping[int, Sequence[float]] | None, kind: str,
) -> dict[object, float]:
    """n_hat_g for every group key of a run (set up once, before training; the release only divides
    by it): B for shared/head/dense groups; for expert (l, e) B pi_hat_{l,e} (``kind="public"``,
    ``shares[l]`` the smoothed PUBLIC owner shares) or B / E_l ("uniform"), by :func:`denominators`.

    Privacy: every input is public (group structure, B, public shares).
    """
    experts_per_layer: dict[int, int] = {}
    for key in groups:
        if getattr(key, "is_expert", False):
            experts_per_layer[key.layer] = experts_per_layer.get(key.layer, 0) + 1
    per_layer: dict[int, list[float]] = {}
    for layer, count in experts_per_layer.items():
        if kind == "public" and (shares is None or layer not in shares):
            raise ConfigError(f"public denominator needs the public owner shares of layer {layer}")
        layer_shares = torch.as_tensor(shares[layer] if kind == "public" else [1.0 / count] * count,
                                       dtype=torch.float64)
        per_layer[layer] = denominators(batch_size, layer_shares, kind).tolist()
    return {key: (per_layer[key.layer][key.expert_id] if getattr(key, "is_expert", False) else float(batch_size))
            for key in groups}


def bias_factors(reference_shares_E: torch.Tensor, public_shares_E: torch.Tensor, kind: str = "public") -> torch.Tensor:
    """Mean scaling of each expert's release: pi_e / pi_hat_e ("public") or E pi_e ("uniform").

    ``reference_shares_E`` plays the role of the true shares pi_e: a held-out public slice, or
    the known shares in a simulation, never the private training set.

    Privacy: public corpus only.
    """
    ref = torch.as_tensor(reference_shares_E, dtype=torch.float64)
    pub = torch.as_tensor(public_shares_E, dtype=torch.float64)
    if kind == "public":
        return ref / pub
    if kind == "uniform":
        return ref * ref.numel()
    raise ConfigError(f"denominator kind must be 'public' or 'uniform', got {kind!r}")


def mean_squared_misscaling(reference_shares_E: torch.Tensor, public_shares_E: torch.Tensor, kind: str = "public") -> float:
    """Load-averaged squared mis-scaling (1/E) sum_e (bias_e - 1)^2 of a denominator rule.

    For kind="uniform" this equals :func:`chi2_to_uniform` of the reference shares.

    Privacy: public corpus only.
    """
    b = bias_factors(reference_shares_E, public_shares_E, kind)
    return float(((b - 1.0) ** 2).mean())


def split_half_bias(owner_N: torch.Tensor, num_experts: int, pseudo_count: float = DEFAULT_PSEUDO_COUNT,
                    split_seed: int = 0) -> float:
    """Public proxy for the public denominator's bias: the mean squared mis-scaling
    (1/E) sum_e (pi_e^A / pi_hat_e^B - 1)^2 of the smoothed shares of one half B of the public
    records against the raw shares of the other half A.

    The halves come from a fixed permutation (``torch.randperm`` with a generator seeded with
    ``split_seed``), so the value is deterministic and insensitive to the corpus order; the seed is
    not a privacy mechanism (the input is public). Near 0 when the layer's public routing is
    stable and balanced; large when small shares are estimated from few records.

    Privacy: public corpus only.
    """
    owner_N = _check_owners(owner_N, num_experts)
    perm = torch.randperm(owner_N.numel(), generator=torch.Generator().manual_seed(split_seed))
    half = owner_N.numel() // 2
    a, b = owner_N[perm[:half]], owner_N[perm[half:]]
    return mean_squared_misscaling(empirical_shares(a, num_experts), owner_shares(b, num_experts, pseudo_count))


def noise_variance(
    noise_multiplier: float,
    clip_norms_E: torch.Tensor | float,
    dims_E: torch.Tensor | int,
    denominators_E: torch.Tensor,
) -> torch.Tensor:
    """sigma_e^2 C_e^2 d_e / n_hat_e^2 per expert: the total noise variance of each expert's update.

    Privacy: public corpus only (plan, clip norms, parameter counts, public denominators).
    """
    n = torch.as_tensor(denominators_E, dtype=torch.float64)
    c = torch.as_tensor(clip_norms_E, dtype=torch.float64)
    d = torch.as_tensor(dims_E, dtype=torch.float64)
    return (noise_multiplier**2) * c**2 * d / n**2


@dataclass(frozen=True)
class LayerStats:
    """One MoE layer's public routing statistics (see the module docstring for the formulas)."""

    layer: int
    num_experts: int
    num_public_records: int
    shares: tuple[float, ...]            # smoothed pi_hat_e
    entropy: float                       # H of the raw public shares, nats
    normalized_entropy: float            # H / log E (1 = uniform); 1.0 when E = 1
    chi2_uniform: float                  # E sum pi^2 - 1 (= B/E variant's mean squared mis-scaling)
    split_half_bias: float               # public-denominator mean squared mis-scaling, split-half proxy
    min_share: float
    max_share: float
    noise_variance: tuple[float, ...] | None = None   # sigma_e^2 C_e^2 d_e / n_hat_e^2 per expert
    mean_noise_variance: float | None = None          # load-weighted: sum_e pi_hat_e Var_e

    def to_dict(self) -> dict:
        return asdict(self)


def layer_stats(
    layer: int,
    owner_N: torch.Tensor,
    num_experts: int,
    *,
    pseudo_count: float = DEFAULT_PSEUDO_COUNT,
    batch_size: float | None = None,
    noise_multiplier: float | None = None,
    clip_norms_E: torch.Tensor | float | None = None,
    dims_E: torch.Tensor | int | None = None,
    denominator: str = "public",
) -> LayerStats:
    """All statistics of one layer from its public owner assignments ``owner_N``.

    Entropy and chi^2 use the raw public shares; the denominators (and hence the variance) use
    the smoothed shares. The variance is filled in when batch size, noise multiplier, clip norms
    and expert sizes are all given.

    Privacy: public corpus only.
    """
    owner_N = _check_owners(owner_N, num_experts)
    raw = empirical_shares(owner_N, num_experts)
    smooth = owner_shares(owner_N, num_experts, pseudo_count)
    h = routing_entropy(raw)
    var = mean_var = None
    given = (batch_size, noise_multiplier, clip_norms_E, dims_E)
    if all(v is not None for v in given):
        v_E = noise_variance(noise_multiplier, clip_norms_E, dims_E, denominators(batch_size, smooth, denominator))
        var, mean_var = tuple(float(x) for x in v_E), float((smooth * v_E).sum())
    elif any(v is not None for v in given):
        raise ConfigError("layer_stats: give all of batch_size, noise_multiplier, clip_norms_E, dims_E, or none")
    return LayerStats(
        layer=int(layer),
        num_experts=num_experts,
        num_public_records=int(owner_N.numel()),
        shares=tuple(float(x) for x in smooth),
        entropy=h,
        normalized_entropy=h / math.log(num_experts) if num_experts > 1 else 1.0,
        chi2_uniform=chi2_to_uniform(raw),
        split_half_bias=split_half_bias(owner_N, num_experts, pseudo_count),
        min_share=float(smooth.min()),
        max_share=float(smooth.max()),
        noise_variance=var,
        mean_noise_variance=mean_var,
    )


# ------------------------------------------------------------------------------------------
# Per-expert clip norms from public per-record gradient norms
# ------------------------------------------------------------------------------------------


def expert_clip_norms(
    public_norms: Mapping[object, torch.Tensor],
    base_clip: float,
    *,
    rule: str = "median-ratio",
    quantile: float = 0.5,
) -> dict[object, float]:
    """Per-expert clip norms C_e from public, unclipped per-record gradient norms of each expert's
    owners (``public_norms[key]`` = norms of the public records that expert ``key`` owns).

    Rules:
    * "median-ratio" (default): C_e = C * m_e / median_f(m_f) with m_e the median public norm of
      e's owners; keeps the median expert at C and scales the others by their typical norm, so
      no expert's signal is suppressed by a clip set for another one;
    * "quantile": C_e = the ``quantile`` of e's public norms (the usual adaptive-clip target);
    * "uniform": C_e = C for all.
    An expert with no public owners (or only zero norms) gets C.

    Privacy: public corpus only (norms from the engine on public batches, without clipping).
    """
    if not base_clip > 0 or math.isinf(base_clip):
        raise ConfigError(f"base_clip must be finite and > 0, got {base_clip!r}")
    if not 0.0 < quantile <= 1.0:
        raise ConfigError(f"quantile must be in (0, 1], got {quantile!r}")
    typical: dict[object, float | None] = {}
    for key, norms in public_norms.items():
        n = torch.as_tensor(norms, dtype=torch.float64).reshape(-1)
        n = n[torch.isfinite(n) & (n > 0)]
        q = 0.5 if rule == "median-ratio" else quantile
        typical[key] = float(torch.quantile(n, q)) if n.numel() else None
    if rule == "uniform":
        return {k: float(base_clip) for k in public_norms}
    if rule == "quantile":
        return {k: (v if v is not None else float(base_clip)) for k, v in typical.items()}
    if rule == "median-ratio":
        known = [v for v in typical.values() if v is not None]
        if not known:
            return {k: float(base_clip) for k in public_norms}
        center = float(torch.tensor(known, dtype=torch.float64).median())
        return {k: (base_clip * v / center if v is not None else float(base_clip)) for k, v in typical.items()}
    raise ConfigError(f"clip rule must be 'median-ratio', 'quantile' or 'uniform', got {rule!r}")


def norms_by_owner(norms_B: torch.Tensor, owner_B: torch.Tensor, num_experts: int) -> dict[int, torch.Tensor]:
    """Split one layer's per-record norms by owner: {e: norms of the records e owns}.

    Privacy: public corpus only.
    """
    owner_B = _check_owners(owner_B, num_experts)
    norms_B = torch.as_tensor(norms_B).reshape(-1)
    return {e: norms_B[owner_B == e] for e in range(num_experts)}


def routing_table(per_layer_owners: Mapping[int, torch.Tensor], num_experts: Mapping[int, int] | int,
                  **kwargs) -> list[LayerStats]:
    """:func:`layer_stats` for every layer of ``per_layer_owners`` ({layer: owner_N}), in layer order.

    Privacy: public corpus only.
    """
    out = []
    for layer in sorted(per_layer_owners):
        e = num_experts if isinstance(num_experts, int) else num_experts[layer]
        out.append(layer_stats(layer, per_layer_owners[layer], e, **kwargs))
    return out


def concat_owners(batches: Sequence[Mapping[int, torch.Tensor]]) -> dict[int, torch.Tensor]:
    """Concatenate per-batch {layer: owner_B} dicts (e.g. from ``engine.route``) into {layer: owner_N}.

    Privacy: public corpus only.
    """
    out: dict[int, list[torch.Tensor]] = {}
    for batch in batches:
        for layer, owner_B in batch.items():
            out.setdefault(int(layer), []).append(torch.as_tensor(owner_B).reshape(-1).long().cpu())
    return {k: torch.cat(v) for k, v in out.items()}
