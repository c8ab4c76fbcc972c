"""Epsilon and delta of a multiset of Poisson-subsampled Gaussian releases, via ``dp_accounting``.

Two accountants, both from Google's ``dp_accounting`` 0.6.0, never re-derived here:

* ``"pld"`` (primary): privacy loss distributions, pessimistic estimate (an upper bound on the true
  epsilon), connect-the-dots discretisation with ``value_discretization_interval`` =
  :data:`VALUE_DISCRETIZATION_INTERVAL` = 2e-4 (dp_accounting's default is 1e-4; building a
  single-release PLD costs time proportional to 1/interval, and 2e-4 halves the cost of a plan
  while moving epsilon by < 2e-5 relative for T <= 20000 and 0.15% at T = 1e5, q = 0.001,
  measured; the bound stays pessimistic either way). For a multiset
  {(q_i, sigma_i): T_i} we compute exactly what ``PLDAccountant`` computes for
  ``ComposedDpEvent([SelfComposedDpEvent(PoissonSampledDpEvent(q_i, GaussianDpEvent(sigma_i)), T_i)])``
  (``from_gaussian_mechanism(...).self_compose(T_i)`` composed in sorted (q, sigma) order), but
  cache the single-release PLD, which is the expensive part, so that a ledger queried every few
  steps pays only for the FFT self-composition; results are cached on (multiset, delta or epsilon).
* ``"rdp"`` (cross-check): ``RdpAccountant`` with its default orders and its improved RDP -> DP
  conversion.

Adjacency (each record's clipped contribution has norm <= C, in units of C):

* ``"add-remove"``: D and D' differ by one record. The dominating pair of one release is
  N(0, sigma^2) vs (1-q) N(0, sigma^2) + q N(1, sigma^2) (``NeighboringRelation.ADD_OR_REMOVE_ONE``).
* ``"replace-one"``: D' replaces one record of D. Its contribution u moves to u' with |u|, |u'| <= 1,
  so the released sum moves by up to 2 (the sensitivity doubles).
  - PLD accounts it with ``NeighboringRelation.REPLACE_ONE``: dp_accounting's pair
    (1-q) N(0) + q N(-1) vs (1-q) N(0) + q N(+1) for the subsampled Gaussian (at q = 1: a Gaussian
    with sensitivity 2, i.e. noise multiplier sigma/2).
  - RDP has no replace-one model for Poisson-subsampled Gaussians in dp_accounting. We go through
    the record-removed dataset D0 = D minus x: M(D) vs M(D0) and M(D0) vs M(D') are both add/remove
    pairs, and Mironov's weak triangle inequality (Renyi DP, 2017, Prop. 11 with exponents 2 and 2)
    gives, for the whole (adaptive) composition, R_replace(a) <= (a - 1/2)/(a - 1) * R(2a) + R(2a - 1)
    with R the composed add/remove RDP, which bounds both directions of the sampled Gaussian pair
    (Mironov, Talwar & Zhang 2019). This is a valid upper bound, looser than the PLD figure.

Privacy: only (q, sigma, count) enter; no private statistic.
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict

import dp_accounting
import numpy as np
from dp_accounting import NeighboringRelation
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

from raptor.accounting.events import check_accountant, check_adjacency, check_delta
from raptor.errors import ConfigError

#: PLD discretisation used for every reported number (ledger, plan, CLI).
VALUE_DISCRETIZATION_INTERVAL: float = 2e-4
#: Coarser PLD discretisation used only inside calibration's search (still a pessimistic upper
#: bound); every calibrated plan is re-checked at :data:`VALUE_DISCRETIZATION_INTERVAL`.
COARSE_DISCRETIZATION_INTERVAL: float = 1e-3

_RELATION = {"add-remove": NeighboringRelation.ADD_OR_REMOVE_ONE,
             "replace-one": NeighboringRelation.REPLACE_ONE}

Counts = tuple[tuple[tuple[float, float], int], ...]


@functools.lru_cache(maxsize=32)
def single_release_pld(sample_rate: float, noise_multiplier: float, adjacency: str,
                       value_discretization_interval: float) -> pld_lib.PrivacyLossDistribution:
    """PLD of one Poisson-subsampled Gaussian release (cached; PLD objects are immutable)."""
    return pld_lib.from_gaussian_mechanism(
        standard_deviation=noise_multiplier,
        value_discretization_interval=value_discretization_interval,
        sampling_prob=sample_rate,
        neighboring_relation=_RELATION[adjacency],
    )


class _LRU:
    def __init__(self, size: int) -> None:
        self.size = size
        self.data: OrderedDict = OrderedDict()

    def get(self, key):
        if key in self.data:
            self.data.move_to_end(key)
            return self.data[key]
        return None

    def put(self, key, value) -> None:
        self.data[key] = value
        self.data.move_to_end(key)
        while len(self.data) > self.size:
            self.data.popitem(last=False)


_COMPOSED_PLD = _LRU(16)
_RDP_CURVE = _LRU(64)
_RESULTS = _LRU(1024)


def clear_caches() -> None:
    """Forget every cached PLD, RDP curve and result (benchmarks use it to time cold calibrations)."""
    single_release_pld.cache_clear()
    for cache in (_COMPOSED_PLD, _RDP_CURVE, _RESULTS):
        cache.data.clear()


def composed_pld(counts: Counts, adjacency: str,
                 value_discretization_interval: float = VALUE_DISCRETIZATION_INTERVAL
                 ) -> pld_lib.PrivacyLossDistribution:
    """PLD of the composition of ``counts`` (as PLDAccountant would compose it), cached."""
    key = (counts, adjacency, value_discretization_interval)
    hit = _COMPOSED_PLD.get(key)
    if hit is not None:
        return hit
    pld = pld_lib.identity(value_discretization_interval=value_discretization_interval)
    for (q, sigma), count in counts:
        one = single_release_pld(q, sigma, adjacency, value_discretization_interval)
        pld = pld.compose(one.self_compose(count))
    _COMPOSED_PLD.put(key, pld)
    return pld


def _rdp_event(counts: Counts) -> dp_accounting.DpEvent:
    return dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), count)
        for (q, sigma), count in counts
    ])


def rdp_curve(counts: Counts, adjacency: str) -> tuple[np.ndarray, np.ndarray]:
    """(orders, RDP) of the composition; replace-one through the weak triangle inequality."""
    key = (counts, adjacency)
    hit = _RDP_CURVE.get(key)
    if hit is not None:
        return hit
    event = _rdp_event(counts)
    base = np.asarray(rdp_lib.DEFAULT_RDP_ORDERS, dtype=np.float64)
    if adjacency == "add-remove":
        acc = rdp_lib.RdpAccountant(orders=list(base))
        acc.compose(event)
        result = (acc.orders, acc.rdp)
    else:
        alphas = base[base > 1.0]
        needed = sorted(set((2 * alphas).tolist()) | set((2 * alphas - 1).tolist()))
        acc = rdp_lib.RdpAccountant(orders=needed)
        acc.compose(event)
        table = dict(zip(acc.orders.tolist(), acc.rdp.tolist()))
        rdp = np.array([(a - 0.5) / (a - 1.0) * table[2 * a] + table[2 * a - 1] for a in alphas.tolist()])
        result = (alphas, rdp)
    _RDP_CURVE.put(key, result)
    return result


def epsilon_of(counts: Counts, delta: float, *, accountant: str = "pld", adjacency: str = "add-remove",
               value_discretization_interval: float = VALUE_DISCRETIZATION_INTERVAL) -> float:
    """Smallest epsilon such that the composition of ``counts`` is (epsilon, delta)-DP (upper bound).

    An empty composition releases nothing: epsilon 0.
    """
    check_delta(delta)
    return _bound("epsilon", counts, delta, accountant, adjacency, value_discretization_interval)


def delta_of(counts: Counts, epsilon: float, *, accountant: str = "pld", adjacency: str = "add-remove",
             value_discretization_interval: float = VALUE_DISCRETIZATION_INTERVAL) -> float:
    """Smallest delta such that the composition of ``counts`` is (epsilon, delta)-DP (upper bound)."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not math.isfinite(epsilon) \
            or epsilon < 0:
        raise ConfigError(f"epsilon={epsilon!r} must be a finite number >= 0.")
    return _bound("delta", counts, epsilon, accountant, adjacency, value_discretization_interval)


def _bound(solve_for: str, counts: Counts, given: float, accountant: str, adjacency: str,
           value_discretization_interval: float) -> float:
    """The cached PLD or RDP bound of ``counts``: epsilon at delta ``given`` (``solve_for="epsilon"``)
    or delta at epsilon ``given`` (``"delta"``, clipped to [0, 1]); 0 for an empty composition."""
    check_accountant(accountant)
    check_adjacency(adjacency)
    if not counts:
        return 0.0
    key = (solve_for, counts, float(given), accountant, adjacency, value_discretization_interval)
    hit = _RESULTS.get(key)
    if hit is not None:
        return hit
    if accountant == "pld":
        pld = composed_pld(counts, adjacency, value_discretization_interval)
        value = pld.get_epsilon_for_delta(given) if solve_for == "epsilon" else pld.get_delta_for_epsilon(given)
    else:
        orders, rdp = rdp_curve(counts, adjacency)
        compute = rdp_lib.compute_epsilon if solve_for == "epsilon" else rdp_lib.compute_delta
        value = compute(orders, rdp, given)[0]
    result = float(max(value, 0.0)) if solve_for == "epsilon" else float(min(max(value, 0.0), 1.0))
    _RESULTS.put(key, result)
    return result
