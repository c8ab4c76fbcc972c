"""Public routing statistics: shares, entropy, chi^2, bias, variance, per-expert clip norms."""

from __future__ import annotations

import math

import pytest
import torch

from raptor.errors import ConfigError
from raptor.roles import public_stats as ps


def test_shares_smoothing_floor_and_sum():
    owners = torch.tensor([0, 0, 0, 1])  # expert 2 owns no public record
    raw = ps.empirical_shares(owners, 3)
    assert torch.allclose(raw, torch.tensor([0.75, 0.25, 0.0], dtype=torch.float64))
    smooth = ps.owner_shares(owners, 3, pseudo_count=1.0)
    assert torch.allclose(smooth, torch.tensor([4 / 7, 2 / 7, 1 / 7], dtype=torch.float64))
    assert (ps.denominators(64, smooth) > 0).all()
    with pytest.raises(ConfigError, match="pseudo_count"):
        ps.owner_shares(owners, 3, pseudo_count=0.0)
    with pytest.raises(ConfigError, match="owner ids"):
        ps.owner_counts(torch.tensor([0, 3]), 3)


def test_entropy_and_chi2_closed_forms():
    E = 8
    uniform = torch.full((E,), 1 / E, dtype=torch.float64)
    assert math.isclose(ps.routing_entropy(uniform), math.log(E))
    assert abs(ps.chi2_to_uniform(uniform)) < 1e-12
    onehot = torch.zeros(E, dtype=torch.float64)
    onehot[3] = 1
    assert ps.routing_entropy(onehot) == 0.0
    assert math.isclose(ps.chi2_to_uniform(onehot), E - 1)
    # chi^2 = mean squared mis-scaling of the uniform denominator, and ~ 2 (log E - H) near uniform.
    p = torch.softmax(0.05 * torch.randn(E, generator=torch.Generator().manual_seed(0), dtype=torch.float64), 0)
    assert math.isclose(ps.chi2_to_uniform(p), ps.mean_squared_misscaling(p, p, "uniform"), rel_tol=1e-12)
    assert math.isclose(ps.chi2_to_uniform(p), 2 * (math.log(E) - ps.routing_entropy(p)), rel_tol=0.05)


def test_bias_factors_public_and_uniform():
    true = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    pub = torch.tensor([0.4, 0.4, 0.2], dtype=torch.float64)
    assert torch.allclose(ps.bias_factors(true, pub, "public"), torch.tensor([1.25, 0.75, 1.0], dtype=torch.float64))
    assert torch.allclose(ps.bias_factors(true, pub, "uniform"), 3 * true)
    assert ps.mean_squared_misscaling(true, true, "public") == 0.0


def test_bias_factor_matches_simulated_estimator_mean():
    # E[sum over Poisson-sampled owners of e] / n_hat_e  =  (pi_e / pi_hat_e) * mu_e  with mu_e = 1.
    N, q, E = 2000, 0.05, 3
    g = torch.Generator().manual_seed(1)
    owner_N = torch.multinomial(torch.tensor([0.6, 0.3, 0.1]), N, replacement=True, generator=g)
    true = ps.empirical_shares(owner_N, E)
    pub = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    n_hat = ps.denominators(q * N, pub)
    est = torch.zeros(E, dtype=torch.float64)
    reps = 400
    for _ in range(reps):
        s = torch.rand(N, generator=g) < q
        est += torch.bincount(owner_N[s], minlength=E).double() / n_hat
    assert torch.allclose(est / reps, ps.bias_factors(true, pub), rtol=0.05)


def test_noise_variance_formula_and_layer_stats():
    v = ps.noise_variance(2.0, torch.tensor([1.0, 0.5]), torch.tensor([100, 100]), torch.tensor([10.0, 5.0]))
    assert torch.allclose(v, torch.tensor([4 * 1 * 100 / 100, 4 * 0.25 * 100 / 25], dtype=torch.float64))
    owners = torch.tensor([0, 1, 2, 3] * 10)
    s = ps.layer_stats(2, owners, 4, batch_size=32, noise_multiplier=1.0, clip_norms_E=1.0, dims_E=10)
    assert s.layer == 2 and s.num_public_records == 40
    assert math.isclose(s.normalized_entropy, 1.0) and abs(s.chi2_uniform) < 1e-12
    assert math.isclose(s.mean_noise_variance, 10 / 64)  # n_hat = 8 for all
    with pytest.raises(ConfigError, match="give all"):
        ps.layer_stats(0, owners, 4, batch_size=32)


def test_split_half_bias_definition_and_ordering():
    g = torch.Generator().manual_seed(3)
    balanced = torch.multinomial(torch.full((4,), 0.25), 4000, replacement=True, generator=g)
    skewed = torch.multinomial(torch.tensor([0.97, 0.01, 0.01, 0.01]), 60, replacement=True, generator=g)
    assert ps.split_half_bias(balanced, 4) < 0.01
    assert ps.split_half_bias(skewed, 4) > ps.split_half_bias(balanced, 4)
    perm = torch.randperm(60, generator=torch.Generator().manual_seed(0))
    a, b = skewed[perm[:30]], skewed[perm[30:]]
    expected = ((ps.empirical_shares(a, 4) / ps.owner_shares(b, 4) - 1) ** 2).mean().item()
    assert math.isclose(ps.split_half_bias(skewed, 4), expected, rel_tol=1e-12)


def test_expert_clip_norms_rules():
    norms = {"a": torch.tensor([1.0, 2.0, 3.0]), "b": torch.tensor([4.0, 6.0, 8.0]),
             "c": torch.tensor([10.0]), "empty": torch.tensor([])}
    med = ps.expert_clip_norms(norms, 1.0, rule="median-ratio")
    assert med == {"a": pytest.approx(2 / 6), "b": pytest.approx(1.0), "c": pytest.approx(10 / 6), "empty": 1.0}
    q = ps.expert_clip_norms(norms, 1.0, rule="quantile", quantile=1.0)
    assert q == {"a": 3.0, "b": 8.0, "c": 10.0, "empty": 1.0}
    assert set(ps.expert_clip_norms(norms, 2.0, rule="uniform").values()) == {2.0}
    with pytest.raises(ConfigError, match="clip rule"):
        ps.expert_clip_norms(norms, 1.0, rule="mean")
    split = ps.norms_by_owner(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1, 0, 1]), 2)
    assert torch.equal(split[1], torch.tensor([1.0, 3.0])) and torch.equal(split[0], torch.tensor([2.0]))


def test_concat_owners_and_routing_table():
    batches = [{0: torch.tensor([0, 1]), 1: torch.tensor([2, 2])}, {0: torch.tensor([1]), 1: torch.tensor([0])}]
    owners = ps.concat_owners(batches)
    assert torch.equal(owners[0], torch.tensor([0, 1, 1])) and torch.equal(owners[1], torch.tensor([2, 2, 0]))
    table = ps.routing_table(owners, {0: 2, 1: 3})
    assert [t.layer for t in table] == [0, 1] and [t.num_experts for t in table] == [2, 3]


def test_n_hat_has_one_home_and_only_that_module_claims_it():
    """Issue 25: the public denominators are set up in roles/public_stats.py alone (not in the per-step
    release), and no other docstring claims to be "the one place" they are computed."""
    import re
    from pathlib import Path

    import raptor
    from raptor.roles.groups import GroupKey
    from raptor.training.step import release

    assert ps.group_denominators.__module__ == "raptor.roles.public_stats"
    assert not hasattr(release, "group_denominators")
    src = Path(raptor.__file__).parent
    claims = sorted(str(p.relative_to(src)) for p in src.rglob("*.py")
                    for m in re.finditer(r"one\s+place|nowhere\s+else|computed\s+only", p.read_text())
                    if "n_hat" in p.read_text()[max(0, m.start() - 200):m.end() + 200])
    assert claims == ["roles/public_stats.py"]
    keys = [GroupKey.shared(), GroupKey.expert(0, 0), GroupKey.expert(0, 1)]
    dens = ps.group_denominators(keys, batch_size=10, shares={0: [0.25, 0.75]}, kind="public")
    assert dens == {keys[0]: 10.0, keys[1]: 2.5, keys[2]: 7.5}
    assert ps.group_denominators(keys, batch_size=10, shares=None, kind="uniform")[keys[2]] == 5.0
    with pytest.raises(ConfigError, match="public owner shares of layer 0"):
        ps.group_denominators(keys, batch_size=10, shares=None, kind="public")
