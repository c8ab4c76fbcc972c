"""The owner-map perturbation: a data-independent coin keyed by (seed, record id)."""

from __future__ import annotations

import math

import pytest
import torch

from raptor.errors import ConfigError
from raptor.roles.perturb import OwnerPerturbation, owner_coins, perturb_owners


def _owners(n: int, e: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, e, (n,), generator=torch.Generator().manual_seed(seed))


def test_coins_are_deterministic_uniform_and_keyed_by_seed_and_id():
    ids = torch.arange(20_000)
    a, b = owner_coins(3, ids), owner_coins(3, ids)
    assert torch.equal(a, b)
    assert float(a.min()) >= 0.0 and float(a.max()) < 1.0
    assert abs(float(a.mean()) - 0.5) < 0.01  # se 0.002
    assert abs(float((a < 0.3).double().mean()) - 0.3) < 0.015
    assert not torch.equal(a, owner_coins(4, ids))  # another seed, other coins
    # one record's coin does not depend on the order or on which other records are present
    perm = torch.randperm(20_000, generator=torch.Generator().manual_seed(1))
    assert torch.equal(owner_coins(3, ids[perm]), a[perm])
    assert torch.equal(owner_coins(3, ids[17:18]), a[17:18])


def test_coins_do_not_touch_torch_global_rng():
    torch.manual_seed(123)
    expect = torch.rand(3)
    torch.manual_seed(123)
    owner_coins(0, torch.arange(100))
    assert torch.equal(torch.rand(3), expect)


def test_same_seed_same_map():
    own = _owners(500, 4)
    spec = OwnerPerturbation(beta=0.4, target=2, seed=7)
    assert torch.equal(perturb_owners(own, torch.arange(500), spec, num_experts=4),
                       perturb_owners(own.clone(), torch.arange(500), spec, num_experts=4))
    other = perturb_owners(own, torch.arange(500), OwnerPerturbation(beta=0.4, target=2, seed=8), num_experts=4)
    assert not torch.equal(other, perturb_owners(own, torch.arange(500), spec, num_experts=4))


def test_beta_zero_is_the_identity():
    own = _owners(300, 8)
    out = perturb_owners(own, torch.arange(300), OwnerPerturbation(beta=0.0, target=0, seed=5), num_experts=8)
    assert torch.equal(out, own)


def test_beta_one_moves_every_record():
    own = _owners(300, 8)
    out = perturb_owners(own, torch.arange(300), OwnerPerturbation(beta=1.0, target=5, seed=5), num_experts=8)
    assert torch.equal(out, torch.full_like(own, 5))


@pytest.mark.parametrize("beta", [0.2, 0.6])
def test_rate_and_only_non_target_records_move(beta):
    n, e, target = 20_000, 4, 1
    own = _owners(n, e)
    out = perturb_owners(own, torch.arange(n), OwnerPerturbation(beta=beta, target=target, seed=11), num_experts=e)
    moved = out != own
    assert bool((out[moved] == target).all())          # a mover goes to the target
    assert not bool(moved[own == target].any())         # a target record never moves
    non_target = own != target
    rate = float(moved[non_target].double().mean())
    se = math.sqrt(beta * (1 - beta) / int(non_target.sum()))
    assert abs(rate - beta) < 5 * se


def test_public_and_private_records_get_the_same_coin_semantics():
    """One function for both sets: a record's move depends on (seed, its id, its owner) only, so
    perturbing the public and the private sets separately equals perturbing their union."""
    e, spec = 4, OwnerPerturbation(beta=0.5, target=3, seed=2)
    pub, priv = _owners(200, e, 1), _owners(700, e, 2)
    pub_ids, priv_ids = torch.arange(200), torch.arange(700)
    out_pub = perturb_owners(pub, pub_ids, spec, num_experts=e)
    out_priv = perturb_owners(priv, priv_ids, spec, num_experts=e)
    # records with the same id and the same natural owner make the same move in either set
    same = pub == priv[:200]
    assert torch.equal(out_pub[same], out_priv[:200][same])
    # computing the private map in two halves (two batches) gives the same owners
    halves = torch.cat([perturb_owners(priv[:350], priv_ids[:350], spec, num_experts=e),
                        perturb_owners(priv[350:], priv_ids[350:], spec, num_experts=e)])
    assert torch.equal(halves, out_priv)
    # and the move is exactly the coin rule
    coins = owner_coins(2, priv_ids)
    assert torch.equal(out_priv, torch.where((priv != 3) & (coins < 0.5), torch.tensor(3), priv))


def test_floor_keeps_a_fraction_and_needs_consent():
    n, e = 2_000, 4
    own = _owners(n, e)
    spec = OwnerPerturbation(beta=0.9, target=0, seed=1, floor=0.25)
    with pytest.raises(ConfigError, match="couples records"):
        perturb_owners(own, torch.arange(n), spec, num_experts=e)
    out = perturb_owners(own, torch.arange(n), spec, num_experts=e, coupled_ok=True)
    for x in range(1, e):
        assert int((out == x).sum()) == math.ceil(0.25 * int((own == x).sum()))
    # the floor only holds back movers: every record it lets move is one the plain rule moves
    plain = perturb_owners(own, torch.arange(n), OwnerPerturbation(beta=0.9, target=0, seed=1), num_experts=e)
    moved = out != own
    assert bool((plain[moved] == 0).all())


def test_bad_specs_are_refused():
    with pytest.raises(ConfigError, match="beta"):
        OwnerPerturbation(beta=1.5, target=0)
    with pytest.raises(ConfigError, match="target"):
        perturb_owners(torch.zeros(3, dtype=torch.long), [0, 1, 2], OwnerPerturbation(beta=0.1, target=4), num_experts=4)
    with pytest.raises(ConfigError, match="record ids"):
        perturb_owners(torch.zeros(3, dtype=torch.long), [0, 1], OwnerPerturbation(beta=0.1, target=0), num_experts=4)
