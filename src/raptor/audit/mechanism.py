"""A white-box audit of one update's real release path, tight enough to catch bugs.

The mechanism under test is one raptor update on a tiny OLMoE classifier (top-2 routing), shared
stream (the classification head) and the expert stream of one trained MoE layer, released through
the code real runs use:

* per-record clipping and owner assignment by :class:`raptor.per_sample.PerRecordEngine`
  (``grouping="roles"``: a record's gradient reaches only its owner expert);
* one :class:`raptor.training.step.plan.StepPlan` (from ``build_step_plan`` with a
  :class:`raptor.training.step.noise_plans.FixedPlan`, the public n_hat of ``group_denominators``), whose
  update 0 states the released groups (stream, C_g, sigma_g, n_hat_g) and the ledger event;
* noise and division by :func:`raptor.training.step.release.release_gradients` for exactly those
  groups, from an explicit generator (seeded here: an audit must be reproducible);
* the claim: that step's ledger event in the plan's own ledger (``StepPlan.new_ledger``), PLD.

Neighbouring datasets: a fixed background batch (the rest of the sampled batch, known to the
white-box auditor) with or without one canary record whose owner is a chosen expert and whose
gradient is clipped in every group it reaches. The canary joins the update by Poisson sampling with
probability q, so the claim audited is the subsampled Gaussian's epsilon at q. (Conditioning on the
other records' inclusion is what the add/remove analysis of Poisson subsampling does anyway.)

Releases are vectorised: the clipped sums of R releases are stacked on a new leading axis (the
background sum plus the canary's clipped contribution where it was sampled) and go through
``release_gradients`` once, with every group's slice lifted to that axis; each replicate gets its own
noise draws. The attacker's score is the Gaussian log-likelihood ratio of "canary sampled" vs "not
sampled", per group: white-box means (the noiseless release of each world, by the same code path)
and per-group noise variances fitted on separate releases. For the correct mechanism that is the
optimal test; it also sees a variance change (a data-dependent denominator). The threshold is
chosen on one sample of releases and the Clopper-Pearson bound is computed on another
(:func:`raptor.audit.bounds.threshold_audit`).

Deliberately broken variants (each must be caught: bound above its claim):

* ``noise-4x-too-small``: every sigma divided by 4, claim unchanged;
* ``realized-count-denominator``: each expert sum divided by its realized number of sampled owners
  (an expert with none is not updated), instead of the public n_hat;
* ``non-owner-update``: owner masking off, so the canary's gradient also updates its other top-2
  expert (clipped there too), while the claim counts one expert per layer;
* ``per-stream-sum``: sigma_s and sigma_e calibrated separately, each stream to half the target
  epsilon at the same delta, and the two epsilons added as the claim.

Delta: the audit compares at ``delta = 1e-2``, where tens of thousands of releases make a threshold
test tight; the bound at a run's delta (1e-5) from the same releases is valid but much weaker,
because (epsilon, 1e-5) is decided by events rarer than the sample can show.

Privacy: every record here is synthetic; nothing reads a dataset.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch

from raptor.audit.bounds import MIN_ERRORS, ThresholdBound, threshold_audit
from raptor.audit.names import GENERATORS, STREAMS, VARIANTS
from raptor.errors import ConfigError


@dataclass(frozen=True)
class MechanismAuditConfig:
    """Sizes and privacy parameters of one mechanism audit (defaults: what the CI tests use)."""

    variant: str = "correct"
    streams: str = "joint"          # which released groups the attacker scores: both streams, or one
    sample_rate: float = 0.1        # q: the canary's Poisson inclusion probability
    sigma_eff: float = 0.5          # the joint step's noise multiplier
    shared_ratio: float = 0.5       # share of 1/sigma_eff^2 given to the shared stream
    delta: float = 1e-2
    significance: float = 0.05      # confidence 95 %
    releases: int = 20_000          # per world, once for choosing the threshold and once for the bound
    fit_releases: int = 2_000       # per world, for the per-group noise variances of the score
    background: int = 6             # records of the batch besides the canary
    background_owners: int = 2      # how many of them the canary's owner expert owns
    owner: int = 1                  # the canary's owner expert (in the trained layer)
    layer: int = 0                  # the trained MoE layer (not the last: every token reaches the head)
    clip_fraction: float = 0.5      # C_g = this x the canary's gradient norm in g (so the canary is clipped)
    seed: int = 0
    chunk: int = 5_000
    noise_divisor: float = 1.0      # > 1 plants a bug for the power curve: released sigma / f, claim unchanged
    divided_streams: str = "joint"  # whose released noise ``noise_divisor`` divides: both streams, or one
    generator: str = "torch"        # the noise stream: a seeded torch generator, or "aes-ctr" (secure runs' own)
    min_errors: int = MIN_ERRORS    # the threshold's fewest fitting-sample errors (bounds.MIN_ERRORS)

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ConfigError(f"--variant must be one of {', '.join(VARIANTS)}, got {self.variant!r}")
        if self.streams not in STREAMS:
            raise ConfigError(f"--streams must be one of {', '.join(STREAMS)}, got {self.streams!r}")
        if not 0.0 < self.sample_rate <= 1.0:
            raise ConfigError(f"--sample-rate must be in (0, 1], got {self.sample_rate!r}")
        if not self.sigma_eff > 0:
            raise ConfigError(f"--sigma must be > 0, got {self.sigma_eff!r}")
        if not 0.0 < self.shared_ratio < 1.0:
            raise ConfigError(f"--shared-ratio must be in (0, 1), got {self.shared_ratio!r}")
        if not 0.0 < self.clip_fraction < 1.0:
            raise ConfigError(f"clip_fraction must be in (0, 1) so the canary is clipped, got {self.clip_fraction!r}")
        for name in ("releases", "fit_releases", "chunk"):
            if getattr(self, name) < 100:
                raise ConfigError(f"{name} must be >= 100, got {getattr(self, name)!r}")
        if not 1 <= self.background_owners <= self.background:
            raise ConfigError("background_owners must be in [1, background]")
        if not (self.noise_divisor > 0 and math.isfinite(self.noise_divisor)):
            raise ConfigError(f"noise_divisor must be finite and > 0, got {self.noise_divisor!r}")
        if self.divided_streams not in STREAMS:
            raise ConfigError(f"divided_streams must be one of {', '.join(STREAMS)}, got {self.divided_streams!r}")
        if self.generator not in GENERATORS:
            raise ConfigError(f"--generator must be one of {', '.join(GENERATORS)}, got {self.generator!r}")


@dataclass
class MechanismAuditResult:
    """The bound next to the claim, and the evaluation scores (for the plot)."""

    config: MechanismAuditConfig
    claimed_epsilon: float
    bound: ThresholdBound
    sigma_shared: float
    sigma_expert: float
    clip_shared: float
    clip_expert: float
    group_dims: dict
    seconds: float
    in_scores: np.ndarray = field(repr=False)
    out_scores: np.ndarray = field(repr=False)

    @property
    def epsilon_lower_bound(self) -> float:
        return self.bound.epsilon

    def to_dict(self) -> dict:
        return {
            "audit": "mechanism", "variant": self.config.variant, "streams": self.config.streams,
            "claimed_epsilon": self.claimed_epsilon, "epsilon_lower_bound": self.bound.epsilon,
            "ratio": self.bound.epsilon / self.claimed_epsilon if self.claimed_epsilon > 0 else math.inf,
            "exceeds_claim": self.bound.epsilon > self.claimed_epsilon,
            "delta": self.config.delta, "confidence": 1.0 - self.config.significance,
            "bound": self.bound.to_dict(), "config": asdict(self.config),
            "sigma": {"shared": self.sigma_shared, "expert": self.sigma_expert},
            "clip": {"shared": self.clip_shared, "expert": self.clip_expert},
            "group_dims": self.group_dims, "seconds": self.seconds,
            "scores": {"in_mean": float(np.mean(self.in_scores)), "out_mean": float(np.mean(self.out_scores))},
        }


# --------------------------------------------------------------------------- the tiny model and records
def _tiny_model(seed: int, layer: int):
    from raptor.moe.adapters import get_adapter
    from raptor.moe.models import TinySize, build_model

    size = TinySize(vocab_size=64, hidden_size=8, num_layers=2, num_heads=4, num_experts=4, top_k=2,
                    expert_intermediate=8, max_positions=32)
    model = build_model("olmoe", num_labels=2, generator=torch.Generator().manual_seed(seed), size=size)
    model.eval()
    adapter = get_adapter(model)
    adapter.prepare(model)
    layers = {info.index: info for info in adapter.moe_layers(model)}
    if layer not in layers:
        raise ConfigError(f"layer {layer} is not an MoE layer of the audit model; MoE layers: {sorted(layers)}")
    trained = {id(p) for p in layers[layer].experts.parameters()} | {id(p) for p in model.score.parameters()}
    for p in model.parameters():
        p.requires_grad_(id(p) in trained)  # shared stream = the head; expert stream = layer's experts
    return model


class _UnmaskedEngine:
    """The engine with owner masking switched off (the ``non-owner-update`` bug)."""

    def __new__(cls, model, trained_layers):
        from raptor.per_sample.engine import PerRecordEngine

        class Unmasked(PerRecordEngine):
            def _call(self, tape, mask_BT):
                call = super()._call(tape, mask_BT)
                for state in call.layers.values():
                    state.mask_owners = False
                return call

        return Unmasked(model, trained_layers=trained_layers, grouping="roles")


def _records(gen: torch.Generator, n: int, length: int = 8) -> dict[str, torch.Tensor]:
    ids = torch.randint(3, 64, (n, length), generator=gen)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.randint(0, 2, (n,), generator=gen)}


def _take(batch: Mapping[str, torch.Tensor], idx) -> dict[str, torch.Tensor]:
    idx = torch.as_tensor(idx, dtype=torch.long)
    return {k: v[idx] for k, v in batch.items()}


@dataclass
class _Setup:
    engine: object
    clip_norms: dict
    denominators: dict
    background_sum: dict
    canary_sum: dict
    owner_counts: dict            # {GroupKey: sampled background owners} (realized-count variant only)
    canary_owner_key: object
    clip_shared: float
    clip_expert: float


def _prepare(cfg: MechanismAuditConfig) -> _Setup:
    from raptor.per_sample.engine import PerRecordEngine
    from raptor.roles import public_stats as ps
    from raptor.roles.groups import GroupKey
    from raptor.roles.public_stats import group_denominators

    model = _tiny_model(cfg.seed, cfg.layer)
    real = PerRecordEngine(model, trained_layers=(cfg.layer,), grouping="roles")
    engine = _UnmaskedEngine(model, (cfg.layer,)) if cfg.variant == "non-owner-update" else real
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    pool = _records(gen, 256)
    owners = real.route(pool)[cfg.layer]
    mine = torch.nonzero(owners == cfg.owner).flatten().tolist()
    others = torch.nonzero(owners != cfg.owner).flatten().tolist()
    if len(mine) < cfg.background_owners + 1 or len(others) < cfg.background - cfg.background_owners:
        raise ConfigError(f"expert {cfg.owner} owns too few of the candidate records; choose another owner expert (the config's owner)")
    canary = _take(pool, mine[:1])
    background = _take(pool, mine[1:1 + cfg.background_owners] + others[:cfg.background - cfg.background_owners])
    public = _records(torch.Generator().manual_seed(cfg.seed + 2), 256)   # synthetic public corpus
    shares = ps.owner_shares(real.route(public)[cfg.layer], 4).tolist()

    inf = {k: math.inf for k in real.group_keys}
    shared_key, owner_key = GroupKey.shared(), GroupKey.expert(cfg.layer, cfg.owner)
    norms = _UnmaskedEngine(model, (cfg.layer,)).compute(canary, inf).norms
    expert_norms = [float(norms[k][0]) for k in real.group_keys if k.is_expert and float(norms[k][0]) > 0]
    # the canary's owner and its other top-2 expert (reached only without masking) are both clipped
    clip_shared = cfg.clip_fraction * float(norms[shared_key][0])
    clip_expert = cfg.clip_fraction * min(expert_norms)
    clips = {k: (clip_expert if k.is_expert else clip_shared) for k in real.group_keys}
    dens = group_denominators(list(real.group_keys), batch_size=cfg.background + 1, shares={cfg.layer: shares},
                              kind="public")
    bg = engine.compute(background, clips)
    cn = engine.compute(canary, clips)
    bg_owners = real.route(background)[cfg.layer]
    counts = {k: int((bg_owners == k.expert_id).sum()) for k in real.group_keys if k.is_expert}
    return _Setup(engine=engine, clip_norms=clips, denominators=dens, background_sum={n: s.detach() for n, s in bg.clipped_sums.items()},
                  canary_sum={n: s.detach() for n, s in cn.clipped_sums.items()}, owner_counts=counts,
                  canary_owner_key=owner_key, clip_shared=clip_shared, clip_expert=clip_expert)


# --------------------------------------------------------------------------- sigmas and the claim
def _step_plan(cfg: MechanismAuditConfig, prep: _Setup, sigma_shared: float, sigma_expert: float):
    """The one-update step plan of the audited mechanism (the trainer's own object)."""
    from raptor.training.step.noise_plans import FixedPlan
    from raptor.training.step.plan import build_step_plan

    noise = FixedPlan(cfg.sample_rate, 1, {"shared": sigma_shared, "expert": sigma_expert}, 1, delta=cfg.delta)
    return build_step_plan(noise, prep.engine.group_map.groups, clip_norms=prep.clip_norms,
                           denominators=prep.denominators, trained_layers=(cfg.layer,), grouping="roles")


def _ledger_epsilon(plan, sample_rate: float, sigma: float, delta: float) -> float:
    ledger = plan.new_ledger()
    ledger.record(sample_rate, sigma)
    return float(ledger.epsilon(delta))


def _step_epsilon(q: float, sigma: float, delta: float) -> float:
    """epsilon of one Poisson-subsampled Gaussian step (PLD, add/remove)."""
    from raptor.accounting.ledger import PrivacyLedger

    ledger = PrivacyLedger(accountant="pld", adjacency="add-remove")
    ledger.record(q, sigma)
    return float(ledger.epsilon(delta))


def _calibrate(q: float, target: float, delta: float, low: float = 0.1) -> float:
    """sigma whose one subsampled-Gaussian step has epsilon = target at delta (Brent's method in log
    sigma on [low, 10]). A ``low`` known to be below the answer saves the slow PLD of a tiny sigma."""
    import scipy.optimize

    def gap(log_sigma: float) -> float:
        return _step_epsilon(q, math.exp(log_sigma), delta) - target

    return math.exp(scipy.optimize.brentq(gap, math.log(low), math.log(10.0), xtol=1e-3))


def planned_sigmas(cfg: MechanismAuditConfig) -> tuple[float, float]:
    """(sigma_s, sigma_e) the audited mechanism plans: the split of sigma_eff, or for ``per-stream-sum``
    each stream calibrated alone to half the joint step's epsilon at the same delta."""
    from raptor.accounting.rules import split_noise_multiplier

    if cfg.variant == "per-stream-sum":  # sigma_eff spends twice the target alone: the answer is above it
        s = _calibrate(cfg.sample_rate, _step_epsilon(cfg.sample_rate, cfg.sigma_eff, cfg.delta) / 2.0, cfg.delta,
                       low=cfg.sigma_eff if 0.1 < cfg.sigma_eff < 10.0 else 0.1)
        return s, s
    return split_noise_multiplier(cfg.sigma_eff, cfg.shared_ratio, 1)


def claimed_epsilon(cfg: MechanismAuditConfig, plan) -> float:
    """The epsilon claimed for what the attacker sees: the step's ledger event (joint), what one stream
    alone releases (``--streams shared|expert``), or the per-stream epsilons added (``per-stream-sum``)."""
    step = plan.step(0)
    sigma = {"shared": plan.sigmas["shared"], "expert": plan.sigmas["expert"]}
    if cfg.variant == "per-stream-sum":
        return sum(_ledger_epsilon(plan, step.sample_rate, sigma[s], cfg.delta) for s in ("shared", "expert"))
    if cfg.streams in ("shared", "expert"):
        return _ledger_epsilon(plan, step.sample_rate, sigma[cfg.streams], cfg.delta)  # one layer: sigma_e
    return _ledger_epsilon(plan, step.sample_rate, step.ledger_sigma, cfg.delta)


# --------------------------------------------------------------------------- vectorised releases
@dataclass(frozen=True)
class _Lifted:
    name: str
    index: object


def _lift(slices_of: Mapping) -> dict:
    """Each group's slices with a leading replicate axis: index i on dim 0 becomes (:, i)."""
    return {key: [_Lifted(sl.name, None if sl.index is None else (slice(None), sl.index)) for sl in slices]
            for key, slices in slices_of.items()}


class _Releaser:
    """R releases of the audited update at once, through ``release_gradients`` and the step plan's groups."""

    def __init__(self, cfg: MechanismAuditConfig, prep: _Setup, plan):
        self.cfg, self.prep = cfg, prep
        self.slices = _lift(prep.engine.group_map.groups)
        groups = plan.step(0).groups  # released = accounted: the plan's update 0
        if cfg.variant == "noise-4x-too-small":
            groups = tuple(replace(g, sigma=g.sigma / 4.0) for g in groups)
        if cfg.noise_divisor != 1.0:
            divided = {"joint": ("shared", "expert"), "shared": ("shared",), "expert": ("expert",)}[cfg.divided_streams]
            groups = tuple(replace(g, sigma=g.sigma / cfg.noise_divisor) if g.stream in divided else g for g in groups)
        self.releases = groups
        self.silent = tuple(replace(g, sigma=0.0) for g in groups)  # the noiseless release (white-box means)
        keep = {"joint": ("shared", "expert"), "shared": ("shared",), "expert": ("expert",)}[cfg.streams]
        self.scored = [r for r in self.releases if r.stream in keep]

    def __call__(self, included: torch.Tensor, generator: torch.Generator | None) -> dict:
        """{GroupKey: [R, d_g] released values} for canary inclusion indicators ``included`` [R]
        (``generator=None``: without noise)."""
        from raptor.training.step.release import release_gradients

        R = included.shape[0]
        b = included.to(torch.float32)
        sums = {}
        for name, s_bg in self.prep.background_sum.items():
            c = self.prep.canary_sum[name]
            sums[name] = s_bg.unsqueeze(0) + b.view((R,) + (1,) * c.dim()) * c.unsqueeze(0)
        out = release_gradients(sums, self.slices, sums, self.releases if generator is not None else self.silent,
                                generator if generator is not None else torch.Generator())
        if self.cfg.variant == "realized-count-denominator":
            self._realized_denominators(out, included)
        return {r.key: torch.cat([self._view(out, sl).reshape(R, -1) for sl in self.slices[r.key]], dim=1)
                for r in self.scored}

    @staticmethod
    def _view(out, sl):
        return out[sl.name] if sl.index is None else out[sl.name][sl.index]

    def _realized_denominators(self, out: dict, included: torch.Tensor) -> None:
        """The bug: n = realized owner count of the sampled batch (no update when it is 0), not n_hat."""
        for rel in self.releases:
            if rel.stream != "expert":
                continue
            count = self.prep.owner_counts[rel.key] + (included.long() if rel.key == self.prep.canary_owner_key
                                                      else torch.zeros_like(included, dtype=torch.long))
            factor = torch.where(count > 0, rel.denominator / count.clamp(min=1).to(torch.float32),
                                 torch.zeros(count.shape))
            for sl in self.slices[rel.key]:
                view = self._view(out, sl)
                view.mul_(factor.view((-1,) + (1,) * (view.dim() - 1)).to(view.dtype))


class _Score:
    """Per-group Gaussian log-likelihood ratio of "canary sampled" vs "not sampled"."""

    def __init__(self, mean_in: dict, mean_out: dict, var_in: dict, var_out: dict):
        self.mean_in, self.mean_out, self.var_in, self.var_out = mean_in, mean_out, var_in, var_out

    def __call__(self, x: dict) -> torch.Tensor:
        total = None
        for key in self.mean_in:
            x_Rd = x[key]
            d = x_Rd.shape[1]
            vi, vo = self.var_in[key], self.var_out[key]
            part = (-(x_Rd - self.mean_in[key]).pow(2).sum(1) / (2 * vi) + (x_Rd - self.mean_out[key]).pow(2).sum(1)
                    / (2 * vo) - 0.5 * d * math.log(vi / vo))
            total = part if total is None else total + part
        return total.double()


def _fit_score(release: _Releaser, cfg: MechanismAuditConfig, gen: torch.Generator) -> _Score:
    one, zero = torch.ones(1, dtype=torch.bool), torch.zeros(1, dtype=torch.bool)
    mean_in = {k: v[0] for k, v in release(one, None).items()}
    mean_out = {k: v[0] for k, v in release(zero, None).items()}
    var = {}
    for world, mean in ((True, mean_in), (False, mean_out)):
        acc = {k: 0.0 for k in mean}
        n = 0
        for start in range(0, cfg.fit_releases, cfg.chunk):
            r = min(cfg.chunk, cfg.fit_releases - start)
            x = release(torch.full((r,), world), gen)
            for k, v in x.items():
                acc[k] += float((v.double() - mean[k]).pow(2).mean(1).sum())
            n += r
        var[world] = {k: a / n for k, a in acc.items()}
    # A group released as exactly 0 in one world (an expert skipped for want of owners) has no noise
    # there: floor its variance far below the other world's so the score stays finite (and decisive);
    # a group that is 0 in both worlds carries no information and is left out.
    keys = [k for k in mean_in if max(var[True][k], var[False][k]) > 0]
    floor = {k: 1e-6 * max(var[True][k], var[False][k]) for k in keys}
    return _Score({k: mean_in[k] for k in keys}, {k: mean_out[k] for k in keys},
                  {k: max(var[True][k], floor[k]) for k in keys}, {k: max(var[False][k], floor[k]) for k in keys})


def _noise_generator(cfg: MechanismAuditConfig, gen: torch.Generator):
    """The generator ``release_gradients`` draws the audit's noise from (see :data:`GENERATORS`):
    ``gen`` itself (the seeded stream of the coin flips) or a fresh AES-256-CTR stream."""
    if cfg.generator == "aes-ctr":
        from raptor.mechanisms import AesCtrGenerator

        return AesCtrGenerator("cpu")
    return gen


def _scores(release: _Releaser, score: _Score, cfg: MechanismAuditConfig, gen: torch.Generator,
            world_in: bool, noise=None) -> np.ndarray:
    out = []
    for start in range(0, cfg.releases, cfg.chunk):
        r = min(cfg.chunk, cfg.releases - start)
        included = (torch.rand(r, generator=gen, dtype=torch.float64) < cfg.sample_rate) if world_in \
            else torch.zeros(r, dtype=torch.bool)  # Poisson inclusion of the canary
        x = release(included, gen if noise is None else noise)
        out.append(score(x).numpy())
    return np.concatenate(out)


def run_mechanism_audit(cfg: MechanismAuditConfig = MechanismAuditConfig()) -> MechanismAuditResult:
    """Audit one update (see the module docstring); deterministic for a given ``cfg.seed``."""
    started = time.perf_counter()
    prep = _prepare(cfg)  # the engine needs autograd: not under no_grad
    sigma_s, sigma_e = planned_sigmas(cfg)
    plan = _step_plan(cfg, prep, sigma_s, sigma_e)
    claim = claimed_epsilon(cfg, plan)
    with torch.no_grad():
        release = _Releaser(cfg, prep, plan)
        gen = torch.Generator().manual_seed(cfg.seed + 3)  # the canary's Poisson coin flips
        noise = _noise_generator(cfg, gen)
        score = _fit_score(release, cfg, noise)
        sel_in, sel_out = _scores(release, score, cfg, gen, True, noise), _scores(release, score, cfg, gen, False, noise)
        ev_in, ev_out = _scores(release, score, cfg, gen, True, noise), _scores(release, score, cfg, gen, False, noise)
    bound = threshold_audit(sel_in, sel_out, ev_in, ev_out, delta=cfg.delta, significance=cfg.significance,
                            min_errors=cfg.min_errors)
    dims = {str(r.key): int(sum(math.prod(prep.background_sum[sl.name].shape[1:] if sl.index is not None
                                          else prep.background_sum[sl.name].shape)
                                for sl in prep.engine.group_map.groups[r.key]))
            for r in release.scored}
    return MechanismAuditResult(config=cfg, claimed_epsilon=claim, bound=bound, sigma_shared=sigma_s,
                                sigma_expert=sigma_e, clip_shared=prep.clip_shared, clip_expert=prep.clip_expert,
                                group_dims=dims, seconds=time.perf_counter() - started, in_scores=ev_in,
                                out_scores=ev_out)
