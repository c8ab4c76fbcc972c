"""Epsilon lower bounds from attack scores: threshold tests with Clopper-Pearson intervals, and the
one-run bound of Steinke, Nasr & Jagielski (NeurIPS 2023).

Conventions: a higher score means "the canary was in". ``significance`` is the allowed probability
that a reported lower bound is wrong (confidence = 1 - significance).

Threshold test (many runs, e.g. many releases of one mechanism; Jagielski et al. 2020, Nasr et al.
2021). If a mechanism is (eps, delta)-DP, every test "in iff score >= t" between the two
neighbouring inputs has false-positive rate alpha and false-negative rate beta with

    alpha + e^eps beta >= 1 - delta   and   beta + e^eps alpha >= 1 - delta,

so eps >= log((1 - delta - beta) / alpha) and eps >= log((1 - delta - alpha) / beta). With
Clopper-Pearson upper bounds on alpha and beta (each at significance / 2), the larger of the two
logs is a lower bound on eps that holds with confidence 1 - significance, provided the threshold
was chosen on data independent of the counts (here: a separate fitting sample).

One-run (Steinke et al. 2023, Theorem 3.1 with its delta > 0 extension, Proposition 5.x): m
canaries, each included independently with probability 1/2; an auditor guesses "in" for the r
canaries with the top scores and is right v times. Under (eps, delta)-DP the p-value of v is at most

    beta + alpha * delta * 2m,  beta = P[Binom(r, q) >= v],  q = e^eps / (1 + e^eps),
    alpha = max_{1 <= i <= v} P[v - i <= Binom(r, q) < v] / i,

and the bound is the largest eps whose p-value is still below the significance. The guess count r
is searched over the thresholds of the ROC's upper convex hull with a Bonferroni correction over
those thresholds (the rule of jax_privacy's ``CanaryScoreAuditor.epsilon_one_run``, whose published
test values this module reproduces; the code here is written from the paper).

Privacy: scores are of canaries the auditor inserted; nothing here reads a training record.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import scipy.optimize
import scipy.special
import scipy.stats

from raptor.errors import ConfigError


def _check_significance(significance: float) -> float:
    if not 0.0 < significance < 0.5:
        raise ConfigError(f"significance must be in (0, 0.5) (confidence in (0.5, 1)), got {significance!r}")
    return float(significance)


def _check_delta(delta: float) -> float:
    if not 0.0 <= delta < 1.0:
        raise ConfigError(f"delta must be in [0, 1), got {delta!r}")
    return float(delta)


def _scores(values, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if arr.size == 0:
        raise ConfigError(f"{name} must be non-empty")
    if not np.all(np.isfinite(arr)):
        raise ConfigError(f"{name} must be finite")
    return arr


def clopper_pearson_upper(k, n: int, significance: float) -> np.ndarray:
    """One-sided upper confidence bound on a binomial rate: P[Binom(n, p) <= k] = significance; 1 if k = n."""
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        upper = scipy.stats.beta.ppf(1.0 - significance, k + 1.0, n - k)
    return np.where(k >= n, 1.0, upper)


def clopper_pearson_interval(k: int, n: int, confidence: float) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval for a binomial rate at ``confidence``."""
    a = (1.0 - confidence) / 2.0
    lo = 0.0 if k == 0 else float(scipy.stats.beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(scipy.stats.beta.ppf(1.0 - a, k + 1, n - k))
    return lo, hi


# --------------------------------------------------------------------------- threshold test
@dataclass(frozen=True)
class ThresholdBound:
    """The eps lower bound of one threshold test, with its counts and confidence bounds."""

    epsilon: float
    threshold: float
    false_positive_rate: float
    false_negative_rate: float
    fpr_upper: float
    fnr_upper: float
    n_in: int
    n_out: int
    confidence: float
    delta: float

    def to_dict(self) -> dict:
        return asdict(self)


def _eps_from_rates(fpr_ub: np.ndarray, fnr_ub: np.ndarray, delta: float) -> np.ndarray:
    """max of log((1 - delta - beta)/alpha) and log((1 - delta - alpha)/beta), at least 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.log(np.clip(1.0 - delta - fnr_ub, 0.0, None)) - np.log(fpr_ub)
        b = np.log(np.clip(1.0 - delta - fpr_ub, 0.0, None)) - np.log(fnr_ub)
    eps = np.fmax(np.nan_to_num(a, nan=0.0, neginf=0.0), np.nan_to_num(b, nan=0.0, neginf=0.0))
    return np.maximum(eps, 0.0)


def _counts_at(in_scores: np.ndarray, out_scores: np.ndarray, thresholds: np.ndarray):
    in_sorted, out_sorted = np.sort(in_scores), np.sort(out_scores)
    fn = np.searchsorted(in_sorted, thresholds, side="left")                       # in below t
    fp = out_sorted.size - np.searchsorted(out_sorted, thresholds, side="left")    # out at or above t
    return fn, fp


def epsilon_at_threshold(in_scores, out_scores, threshold: float, *, delta: float,
                         significance: float = 0.05) -> ThresholdBound:
    """The Clopper-Pearson eps lower bound of the test "in iff score >= threshold"."""
    _check_significance(significance)
    _check_delta(delta)
    ins, outs = _scores(in_scores, "in_scores"), _scores(out_scores, "out_scores")
    fn, fp = _counts_at(ins, outs, np.array([float(threshold)]))
    fnr_ub = clopper_pearson_upper(fn, ins.size, significance / 2.0)
    fpr_ub = clopper_pearson_upper(fp, outs.size, significance / 2.0)
    eps = float(_eps_from_rates(fpr_ub, fnr_ub, delta)[0])
    return ThresholdBound(epsilon=eps, threshold=float(threshold), false_positive_rate=float(fp[0]) / outs.size,
                          false_negative_rate=float(fn[0]) / ins.size, fpr_upper=float(fpr_ub[0]),
                          fnr_upper=float(fnr_ub[0]), n_in=int(ins.size), n_out=int(outs.size),
                          confidence=1.0 - significance, delta=delta)


#: Fewest errors of the bound's denominator (false positives for log((1-delta-beta)/alpha), false
#: negatives for the other direction) that a chosen threshold must have on the fitting sample. A
#: threshold with 1 false positive in 20,000 there is a lottery ticket: on the independent evaluation
#: sample it has anything from 0 to 7, and the bound swings with it. With >= 30 the
#: evaluation count is within about +-1/sqrt(30) of it, and the bound is stable across seeds.
#: A small fitting sample asks for fewer: 1 in :data:`MIN_ERROR_FRACTION` of it (at least 1), so that
#: 2,000 releases can still show a large epsilon.
MIN_ERRORS = 30
MIN_ERROR_FRACTION = 400


def best_threshold(in_scores, out_scores, *, delta: float, significance: float = 0.05,
                   candidates: int = 4000, min_errors: int = MIN_ERRORS) -> float:
    """The threshold (among ``candidates`` quantiles of the pooled scores) whose Clopper-Pearson bound
    on THIS data is largest, among thresholds with at least ``min_errors`` errors in the rate that
    the bound divides by (see :data:`MIN_ERRORS`; 0 or 1 restores the unrestricted, high-variance
    choice). Use it on a fitting sample and evaluate on an independent one."""
    ins, outs = _scores(in_scores, "in_scores"), _scores(out_scores, "out_scores")
    if min_errors < 0:
        raise ConfigError(f"min_errors must be >= 0, got {min_errors!r}")
    pooled = np.concatenate([ins, outs])
    grid = np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, candidates)))
    fn, fp = _counts_at(ins, outs, grid)
    fpr_ub = clopper_pearson_upper(fp, outs.size, significance / 2.0)
    fnr_ub = clopper_pearson_upper(fn, ins.size, significance / 2.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.log(np.clip(1.0 - delta - fnr_ub, 0.0, None)) - np.log(fpr_ub)   # divides by alpha
        b = np.log(np.clip(1.0 - delta - fpr_ub, 0.0, None)) - np.log(fnr_ub)   # divides by beta
    need_fp = min(min_errors, max(1, outs.size // MIN_ERROR_FRACTION))
    need_fn = min(min_errors, max(1, ins.size // MIN_ERROR_FRACTION))
    a = np.where(fp >= need_fp, np.nan_to_num(a, nan=-np.inf), -np.inf)
    b = np.where(fn >= need_fn, np.nan_to_num(b, nan=-np.inf), -np.inf)
    eps = np.fmax(a, b)
    if not np.any(np.isfinite(eps)):  # too few errors anywhere: fall back to the unrestricted choice
        eps = _eps_from_rates(fpr_ub, fnr_ub, delta)
    return float(grid[int(np.argmax(eps))])


def threshold_audit(fit_in, fit_out, eval_in, eval_out, *, delta: float, significance: float = 0.05,
                    min_errors: int = MIN_ERRORS) -> ThresholdBound:
    """Choose the threshold on the fitting scores, report the bound on the independent evaluation scores."""
    t = best_threshold(fit_in, fit_out, delta=delta, significance=significance, min_errors=min_errors)
    return epsilon_at_threshold(eval_in, eval_out, t, delta=delta, significance=significance)


# --------------------------------------------------------------------------- one run
def one_run_p_value(m: int, n_guess: int, n_correct: int, epsilon: float, delta: float) -> float:
    """Steinke et al. (2023): an upper bound on P[>= n_correct right of n_guess guesses] under
    (epsilon, delta)-DP with m canaries each included with probability 1/2."""
    q = scipy.special.expit(epsilon)
    beta = float(scipy.stats.binom.sf(n_correct - 1, n_guess, q))
    if delta == 0.0 or n_correct == 0:
        return min(beta, 1.0)
    i = np.arange(1, n_correct + 1)
    window = scipy.stats.binom.sf(n_correct - i - 1, n_guess, q) - beta  # P[v - i <= X < v]
    alpha = float(np.max(window / i))
    return min(beta + alpha * delta * 2.0 * m, 1.0)


def _one_run_epsilon_at(m: int, n_guess: int, n_correct: int, significance: float, delta: float,
                        floor: float) -> float:
    """Largest eps >= floor with p-value <= significance (``floor`` if none)."""
    def slack(eps: float) -> float:
        return significance - one_run_p_value(m, n_guess, n_correct, eps, delta)

    if one_run_p_value(m, n_guess, n_correct, floor, 0.0) > significance or slack(floor) <= 0.0:
        return floor  # the delta = 0 p-value is smaller: a cheap, exact early exit
    lo, hi = floor, max(1.0, 2.0 * floor)
    while slack(hi) > 0.0:
        lo, hi = hi, 2.0 * hi
    return float(scipy.optimize.brentq(slack, lo, hi, xtol=1e-7))


def roc_hull(in_scores: np.ndarray, out_scores: np.ndarray):
    """Thresholds of the upper convex hull of (false negatives, true negatives) over every threshold
    (each distinct score and +inf; "in" iff score >= t), collinear points dropped; with the
    true- and false-positive counts there."""
    thresholds = np.concatenate([np.union1d(in_scores, out_scores), [np.inf]])
    in_sorted, out_sorted = np.sort(in_scores), np.sort(out_scores)
    fn = np.searchsorted(in_sorted, thresholds, side="left")
    tn = np.searchsorted(out_sorted, thresholds, side="left")
    hull: list[int] = []
    for j in range(thresholds.size):  # monotone chain, upper hull (x = fn and y = tn never decrease)
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            cross = (fn[b] - fn[a]) * (tn[j] - tn[a]) - (tn[b] - tn[a]) * (fn[j] - fn[a])
            if cross >= 0:  # b lies on or below the chord a -> j
                hull.pop()
            else:
                break
        hull.append(j)
    idx = np.array(hull)
    return thresholds[idx], in_sorted.size - fn[idx], out_sorted.size - tn[idx]


@dataclass(frozen=True)
class OneRunBound:
    """The one-run eps lower bound and the guess that achieved it."""

    epsilon: float
    threshold: float
    n_guess: int
    n_correct: int
    m: int
    significance: float
    delta: float
    thresholds_tried: int

    def to_dict(self) -> dict:
        return asdict(self)


def one_run_epsilon(in_scores, out_scores, *, significance: float = 0.05, delta: float) -> OneRunBound:
    """One-run eps lower bound (Steinke et al. 2023) from the scores of included and excluded canaries:
    the best "top-r" guess over the ROC hull's thresholds, Bonferroni over them."""
    if not 0.0 < significance < 1.0:
        raise ConfigError(f"significance must be in (0, 1), got {significance!r}")
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"delta must be in (0, 1), got {delta!r}")
    ins, outs = _scores(in_scores, "in_scores"), _scores(out_scores, "out_scores")
    thresholds, tp, fp = roc_hull(ins, outs)
    m = ins.size + outs.size
    sig = significance / thresholds.size
    best, best_j = 0.0, -1
    for j in np.argsort(-(tp / np.maximum(tp + fp, 1))):  # most precise guesses first: prunes the rest
        r, v = int(tp[j] + fp[j]), int(tp[j])
        if r == 0 or v / r <= scipy.special.expit(best):
            continue
        eps = _one_run_epsilon_at(m, r, v, sig, delta, best)
        if eps > best:
            best, best_j = eps, int(j)
    thr = float(thresholds[best_j]) if best_j >= 0 else math.inf
    return OneRunBound(epsilon=best, threshold=thr, n_guess=int(tp[best_j] + fp[best_j]) if best_j >= 0 else 0,
                       n_correct=int(tp[best_j]) if best_j >= 0 else 0, m=m, significance=significance, delta=delta,
                       thresholds_tried=int(thresholds.size))


# --------------------------------------------------------------------------- one run, two-sided guesses
#: Fractions of the m canaries guessed "in" (the top scores) and, separately, "out" (the bottom
#: scores) by :func:`one_run_epsilon_two_sided`; every pair (k+, k-) but (0, 0) is tried, with a
#: Bonferroni correction over the pairs.
GUESS_FRACTIONS: tuple[float, ...] = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5)


def one_run_epsilon_for_guesses(m: int, n_guess: int, n_correct: int, *, significance: float,
                                delta: float) -> float:
    """Steinke, Nasr & Jagielski (2023), Theorems 3.1 (delta = 0) and 5.2 (delta > 0): with m canaries
    each included with probability 1/2, an auditor that makes ``n_guess`` guesses ("in" or "out",
    abstaining on the rest) and is right ``n_correct`` times shows, with confidence 1 - significance,
    that no (eps, delta)-DP mechanism with a smaller eps ran: the largest eps whose p-value
    (:func:`one_run_p_value`) is still <= significance (0 if none).

    All guesses right with delta = 0: the p-value is q^r (q = e^eps / (1 + e^eps)), so the bound is
    ``logit(significance ** (1 / r))``."""
    _check_significance(significance)
    _check_delta(delta)
    if not 0 <= n_correct <= n_guess <= m:
        raise ConfigError(f"need 0 <= n_correct <= n_guess <= m, got {n_correct}, {n_guess}, {m}")
    if n_guess == 0:
        return 0.0
    return _one_run_epsilon_at(m, n_guess, n_correct, significance, delta, 0.0)


@dataclass(frozen=True)
class TwoSidedBound:
    """The one-run bound of the best (k+ "in", k- "out") guess, with its counts."""

    epsilon: float
    k_plus: int
    k_minus: int
    n_correct: int
    m: int
    significance: float
    delta: float
    pairs_tried: int

    @property
    def n_guess(self) -> int:
        return self.k_plus + self.k_minus

    def to_dict(self) -> dict:
        return {**asdict(self), "n_guess": self.n_guess}


def one_run_epsilon_two_sided(scores, included, *, significance: float = 0.05, delta: float,
                              fractions: tuple[float, ...] = GUESS_FRACTIONS) -> TwoSidedBound:
    """One-run bound of Steinke et al. (2023, section 6): guess the k+ canaries with the highest
    scores "in" and the k- with the lowest "out", abstain on the rest, count the right guesses and
    convert with :func:`one_run_epsilon_for_guesses`. (k+, k-) ranges over the pairs of
    ``fractions`` of m (k+ + k- <= m); the best pair is reported at a Bonferroni-corrected
    significance (significance / number of pairs), so the bound holds at the stated confidence."""
    _check_significance(significance)
    _check_delta(delta)
    s = _scores(scores, "scores")
    inc = np.asarray(included, dtype=bool).reshape(-1)
    if inc.shape != s.shape:
        raise ConfigError(f"included has {inc.size} entries for {s.size} scores")
    m = s.size
    order = np.argsort(-s, kind="stable")          # highest score first
    right_in = np.concatenate([[0], np.cumsum(inc[order])])              # right among the top k
    right_out = np.concatenate([[0], np.cumsum(~inc[order[::-1]])])      # right among the bottom k
    ks = sorted({int(round(f * m)) for f in fractions if 0.0 <= f <= 1.0})
    pairs = [(kp, km) for kp in ks for km in ks if 0 < kp + km <= m]
    if not pairs:
        raise ConfigError(f"fractions {fractions!r} give no guess for m = {m} canaries")
    sig = significance / len(pairs)
    best = (0.0, 0, 0, 0)
    for kp, km in sorted(pairs, key=lambda p: -(right_in[p[0]] + right_out[p[1]]) / (p[0] + p[1])):
        r, v = kp + km, int(right_in[kp] + right_out[km])
        if v / r <= scipy.special.expit(best[0]):
            continue  # cannot beat the current bound: the precision is below e^eps / (1 + e^eps)
        eps = _one_run_epsilon_at(m, r, v, sig, delta, best[0])
        if eps > best[0]:
            best = (eps, kp, km, v)
    return TwoSidedBound(epsilon=best[0], k_plus=best[1], k_minus=best[2], n_correct=best[3], m=m,
                         significance=significance, delta=delta, pairs_tried=len(pairs))
