"""RAPTOR's step rules: which single mechanism one update is, for the ledger.

Units: every stream's noise multiplier is its noise std over its clip norm, so a record's
clipped contribution to a stream, divided by that stream's noise std, has norm <= 1/sigma.

Joint step (shared stream + L trained MoE layers released from ONE Poisson sample)
    Concatenate every released sum, each divided by its noise std: the noise is then N(0, I).
    Adding or removing record x changes the shared sum by at most C_s, and in each trained layer
    exactly one expert sum, the owner's, by at most C_{l,e}; the other experts' sums do not
    depend on x (their owner sets are disjoint: parallel composition). So the normalised output
    moves by a vector of squared norm at most 1/sigma_s^2 + L/sigma_e^2, and the step is ONE
    Poisson-subsampled Gaussian mechanism with sensitivity 1 and noise multiplier

        sigma_eff = (1/sigma_s^2 + L/sigma_e^2)^(-1/2).

    The owner function depends only on x and the current model (itself a DP output of earlier
    steps), so the partition may change from step to step (adaptive composition).
    Adding per-stream epsilons, or composing the streams as if they were sampled independently,
    under-reports: with q = 0.01, sigma_s = 0.8, sigma_e = 2.0, L = 1, T = 1000, delta = 1e-5 the
    joint step gives eps = 3.88, independent-sample composition 3.21, and the sum of the two
    per-stream epsilons 3.76 (tested).

Replace-one
    x -> x' may move from expert a to expert b. The difference of the normalised outputs is
    v(x) - v(x') with |v(x)|, |v(x')| <= 1/sigma_eff (each record still touches the shared sum and
    one expert per layer), so the same sigma_eff describes the step and the replace-one accountant
    (doubled sensitivity, see :mod:`raptor.accounting.accountants`) is applied to it.

Alternating schedule (S shared-only steps, then X expert-only steps, repeated)
    Update t (0-based) is shared-only if t mod (S + X) < S, else expert-only. A shared-only step is
    one subsampled Gaussian with sigma_s; an expert-only step releases L layers' expert sums, each
    record touching one expert per layer, so it is one subsampled Gaussian with sigma_e / sqrt(L).

Public denominators (B, B * pi_hat) need no accounting: they are fixed before training from public
data. Anything computed from the private sample must be a release in the ledger.

Privacy: these rules ARE the privacy argument of a step; each is tested.
"""

from __future__ import annotations

import math
from typing import Literal

from raptor.accounting.events import check_count, check_noise_multiplier
from raptor.errors import ConfigError

Phase = Literal["joint", "shared", "expert"]


def joint_noise_multiplier(sigma_shared: float | None, sigma_expert: float | None, num_layers: int) -> float:
    """sigma_eff = (1/sigma_s^2 + L/sigma_e^2)^(-1/2) of a step releasing the given streams.

    A stream given as None is not released: shared only (dense DP-SGD) gives sigma_s; expert only
    gives sigma_e / sqrt(L).
    """
    if sigma_shared is None and sigma_expert is None:
        raise ConfigError("joint_noise_multiplier needs at least one released stream: sigma_shared and "
                          "sigma_expert are both None.")
    if sigma_expert is None:
        return check_noise_multiplier(sigma_shared, "sigma_shared")
    check_count(num_layers, "num_layers")
    sigma_e = check_noise_multiplier(sigma_expert, "sigma_expert")
    if sigma_shared is None:
        return sigma_e / math.sqrt(num_layers)
    sigma_s = check_noise_multiplier(sigma_shared, "sigma_shared")
    return 1.0 / math.sqrt(1.0 / sigma_s**2 + num_layers / sigma_e**2)


def split_noise_multiplier(sigma_eff: float, shared_ratio: float, num_layers: int) -> tuple[float, float]:
    """(sigma_s, sigma_e) with 1/sigma_s^2 = r/sigma_eff^2 and L/sigma_e^2 = (1 - r)/sigma_eff^2.

    r is the share of the step's inverse noise variance (its privacy "spend rate") given to the
    shared stream; the two streams together have exactly sigma_eff.
    """
    check_noise_multiplier(sigma_eff, "sigma_eff")
    check_count(num_layers, "num_layers")
    check_shared_ratio(shared_ratio)
    sigma_s = sigma_eff / math.sqrt(shared_ratio)
    # written so that sigma_e / sqrt(L), the expert-only step's noise, is computed as
    # (sigma_eff / sqrt(1 - r)) * sqrt(L) / sqrt(L): for r = 1/2 and L = 1 it equals sigma_s bit for bit
    sigma_e = sigma_eff / math.sqrt(1.0 - shared_ratio) * math.sqrt(num_layers)
    return sigma_s, sigma_e


def check_shared_ratio(shared_ratio) -> float:
    """Validate the split ratio r of a step releasing both streams: a number in (0, 1)."""
    if isinstance(shared_ratio, bool) or not isinstance(shared_ratio, (int, float)) \
            or not 0.0 < shared_ratio < 1.0:
        raise ConfigError(f"shared_ratio={shared_ratio!r} must be in (0, 1) when both streams are released; "
                          "to release one stream only, drop the other from streams.")
    return float(shared_ratio)


def check_alternate(alternate) -> tuple[int, int] | None:
    """Validate an alternating schedule (S, X): both integers >= 1."""
    if alternate is None:
        return None
    try:
        s, x = alternate
    except (TypeError, ValueError) as err:
        raise ConfigError(f"alternate={alternate!r} must be a pair (S, X) of shared-only and expert-only "
                          "step counts, e.g. (1, 1).") from err
    check_count(s, "alternate[0] (shared-only steps S)")
    check_count(x, "alternate[1] (expert-only steps X)")
    return (s, x)


def alternating_phase(t: int, alternate: tuple[int, int]) -> Phase:
    """Phase of update t (0-based): 'shared' if t mod (S + X) < S, else 'expert'."""
    s, x = alternate
    check_count(t, "t", minimum=0)
    return "shared" if t % (s + x) < s else "expert"


def phase_streams(phase: Phase) -> tuple[str, ...]:
    """The streams an update of ``phase`` releases and applies: both for "joint", else that one."""
    if phase == "joint":
        return ("shared", "expert")
    if phase in ("shared", "expert"):
        return (phase,)
    raise ConfigError(f"phase={phase!r} is not one of 'joint', 'shared', 'expert'.")


def phase_counts(steps: int, alternate: tuple[int, int]) -> tuple[int, int]:
    """(shared-only, expert-only) step counts among updates 0..steps-1 of an alternating schedule."""
    s, x = alternate
    check_count(steps, "steps", minimum=0)
    period = s + x
    n_shared = (steps // period) * s + min(steps % period, s)
    return n_shared, steps - n_shared


def step_noise_multiplier(phase: Phase, sigma_shared: float | None, sigma_expert: float | None,
                          num_layers: int) -> float:
    """The noise multiplier of the single subsampled Gaussian that an update of ``phase`` is."""
    if phase == "joint":
        return joint_noise_multiplier(sigma_shared, sigma_expert, num_layers)
    if phase == "shared":
        if sigma_shared is None:
            raise ConfigError("a shared-only step needs sigma_shared, got None.")
        return joint_noise_multiplier(sigma_shared, None, num_layers)
    if phase == "expert":
        if sigma_expert is None:
            raise ConfigError("an expert-only step needs sigma_expert, got None.")
        return joint_noise_multiplier(None, sigma_expert, num_layers)
    raise ConfigError(f"phase={phase!r} is not one of 'joint', 'shared', 'expert'.")
