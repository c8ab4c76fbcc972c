"""An audit of the training loop itself: many short runs of :meth:`raptor.training.step.trainer.Trainer.step`.

The mechanism audit (:mod:`raptor.audit.mechanism`) releases one update through
``release_gradients`` and takes its claim from the step plan; it never runs the trainer, so a bug
in the loop (the ledger event the trainer records, noise that repeats from step to step) is
outside its reach. This audit runs the real loop:

* the tiny OLMoE of the mechanism audit (head = shared stream, one MoE layer's experts = expert
  stream) and the real :class:`raptor.per_sample.PerRecordEngine` (``grouping="roles"``);
* two neighbouring private sets: ``{b}`` (one background record) and ``{b, canary}``, the canary
  owned by another expert than ``b``;
* for each world, ``runs`` fresh :class:`~raptor.training.step.trainer.Trainer` objects, each doing
  ``steps`` updates of the plan (a :class:`~raptor.training.step.noise_plans.FixedPlan` at sample rate q):
  Poisson sampling, clipping, ``release_gradients``, the ledger, the optimizers. Every run gets
  the audit's two generators (sampling and noise), which advance across runs; SGD with a learning
  rate of 1e-12 keeps the weights (hence every record's gradient) where they were (checked after
  every run), so the white-box means computed once hold at every step. For the same reason the
  engine's result for a sampled batch never changes, and it is computed once per distinct batch
  (there are four: {}, {b}, {canary}, {b, canary}) and reused: the engine's per-record clipping is
  the mechanism audit's subject, the loop around it is this audit's;
* the attacker reads each step's released gradients (what the optimizers receive) and
* the claim is the trainer's OWN ledger after the run: :meth:`Trainer.epsilon_spent`;
* a cross-check, not a statistical bound: the claim must equal the epsilon of the step plan's
  ledger events for the executed updates (``StepPlan.new_ledger`` with ``step.ledger_sigma`` of
  each). A trainer that records other events than its plan states (e.g. 1.5 sigma) fails it even
  where the threshold test lacks the power to see the gap (at 1,000 runs per world the likelihood
  bound of the correct loop is 1.38 against a claim of 2.66 at q = 0.9, two steps, sigma 1.2,
  short of the 1.52 that a trainer recording 1.5 sigma would claim).

Two scores, each with its own threshold test at half the significance (a union bound: the
reported bound is the larger, still at the stated confidence):

* ``likelihood``: the exact log-likelihood ratio of the run's releases, a mixture over the Poisson
  inclusion of b and the canary at each step, per-group noise std from the plan (the optimal test
  for the correct mechanism);
* ``repeat``: for each pair of consecutive steps and each stream, how much better the difference
  of the two releases is explained with the canary than without it
  (``log(fit without canary) - log(fit with canary)``, fits over the {-1, 0, 1} multiples of the
  known per-record contributions). With fresh noise this is a weak score; when a stream's noise
  repeats between steps (a re-seeded generator, noise drawn once and reused) the difference is
  noiseless, the fit without the canary is exact in the "out" world, and the score separates
  the worlds completely.

Privacy: every record here is synthetic; nothing reads a dataset.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from raptor.audit.bounds import MIN_ERRORS, ThresholdBound, threshold_audit
from raptor.errors import ConfigError


@dataclass(frozen=True)
class TrainerLoopAuditConfig:
    """Sizes and privacy parameters of the trainer-loop audit (defaults: what the CI test uses)."""

    steps: int = 3
    sample_rate: float = 0.8
    sigma_eff: float = 2.0
    shared_ratio: float = 0.5
    delta: float = 1e-2
    significance: float = 0.05
    runs: int = 400                 # trainer runs per world, once for the threshold and once for the bound
    owner: int = 1
    layer: int = 0
    clip_fraction: float = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 2:
            raise ConfigError(f"steps must be >= 2 (the repeat score compares consecutive steps), got {self.steps}")
        if not 0.0 < self.sample_rate < 1.0:
            raise ConfigError(f"sample_rate must be in (0, 1), got {self.sample_rate!r}")
        if not self.sigma_eff > 0:
            raise ConfigError(f"sigma_eff must be > 0, got {self.sigma_eff!r}")
        if self.runs < 100:
            raise ConfigError(f"runs must be >= 100, got {self.runs}")


@dataclass
class TrainerLoopAuditResult:
    config: TrainerLoopAuditConfig
    claimed_epsilon: float
    plan_epsilon: float              # the step plan's ledger events for the executed updates
    bounds: dict[str, ThresholdBound]
    seconds: float
    scores: dict[str, tuple[np.ndarray, np.ndarray]] = field(repr=False)

    @property
    def epsilon_lower_bound(self) -> float:
        return max(b.epsilon for b in self.bounds.values())

    @property
    def ledger_consistent(self) -> bool:
        return math.isclose(self.claimed_epsilon, self.plan_epsilon, rel_tol=1e-9)

    @property
    def caught(self) -> bool:
        """A bug: the lower bound above the trainer's claim, or a claim other than the plan's."""
        return self.epsilon_lower_bound > self.claimed_epsilon or not self.ledger_consistent

    def to_dict(self) -> dict:
        return {"audit": "trainer-loop", "claimed_epsilon": self.claimed_epsilon,
                "epsilon_lower_bound": self.epsilon_lower_bound,
                "exceeds_claim": self.epsilon_lower_bound > self.claimed_epsilon,
                "plan_epsilon": self.plan_epsilon, "ledger_consistent": self.ledger_consistent,
                "bounds": {k: b.to_dict() for k, b in self.bounds.items()}, "delta": self.config.delta,
                "confidence": 1.0 - self.config.significance, "config": asdict(self.config),
                "seconds": self.seconds}


@dataclass
class _Loop:
    model: torch.nn.Module
    engine: object
    plan: object
    config: object
    theta0: dict
    records: dict                    # {"out": {b}, "in": {b, canary}}
    contrib: dict                    # {"b" | "c": {GroupKey: [d_g] release-scale contribution}}
    std: dict                        # {GroupKey: noise std of the released coordinate}


def _setup(cfg: TrainerLoopAuditConfig) -> _Loop:
    from raptor.accounting.rules import split_noise_multiplier
    from raptor.audit.mechanism import _records, _take, _tiny_model
    from raptor.per_sample.engine import PerRecordEngine
    from raptor.recipes import tiny_recipe
    from raptor.roles import public_stats as ps
    from raptor.roles.public_stats import group_denominators
    from raptor.training.config import OptimConfig, PrivacyConfig
    from raptor.training.step.noise_plans import FixedPlan
    from raptor.training.step.plan import build_step_plan

    model = _tiny_model(cfg.seed, cfg.layer)
    engine = PerRecordEngine(model, trained_layers=(cfg.layer,), grouping="roles")
    pool = _records(torch.Generator().manual_seed(cfg.seed + 1), 256)
    owners = engine.route(pool)[cfg.layer]
    mine = torch.nonzero(owners == cfg.owner).flatten().tolist()
    others = torch.nonzero(owners != cfg.owner).flatten().tolist()
    if not mine or not others:
        raise ConfigError(f"expert {cfg.owner} owns none (or all) of the candidate records; choose another owner")
    canary, background = _take(pool, mine[:1]), _take(pool, others[:1])
    public = _records(torch.Generator().manual_seed(cfg.seed + 2), 256)
    shares = ps.owner_shares(engine.route(public)[cfg.layer], 4).tolist()
    keys = engine.group_keys
    norms = engine.compute(canary, {k: math.inf for k in keys}).norms
    clip_s = cfg.clip_fraction * float(norms[keys[0]][0])
    clip_e = cfg.clip_fraction * min(float(norms[k][0]) for k in keys if k.is_expert and float(norms[k][0]) > 0)
    clips = {k: (clip_e if k.is_expert else clip_s) for k in keys}
    dens = group_denominators(list(keys), batch_size=2, shares={cfg.layer: shares}, kind="public")
    sigma_s, sigma_e = split_noise_multiplier(cfg.sigma_eff, cfg.shared_ratio, 1)
    noise = FixedPlan(cfg.sample_rate, cfg.steps, {"shared": sigma_s, "expert": sigma_e}, 1, delta=cfg.delta)
    plan = build_step_plan(noise, engine.group_map.groups, clip_norms=clips, denominators=dens,
                           trained_layers=(cfg.layer,), grouping="roles")
    config = tiny_recipe("raptor", steps=cfg.steps, batch_size=2, seed=cfg.seed,
                         privacy=PrivacyConfig(epsilon=None, noise_multipliers=(sigma_s, sigma_e), secure_rng=False),
                         optim=OptimConfig(name="sgd", lr=1e-12, weight_decay=0.0))
    slices = engine.group_map.groups
    contrib = {}
    for name, rec in (("b", background), ("c", canary)):
        sums = engine.compute(rec, plan.clip_norms).clipped_sums
        contrib[name] = {g.key: _flat(sums, slices[g.key], divide=g.denominator) for g in plan.groups}
    theta0 = {n: p.detach().clone() for n, p in engine.group_map.params.items()}
    both = {k: torch.cat([background[k], canary[k]]) for k in canary}
    return _Loop(model=model, engine=_MemoEngine(engine), plan=plan, config=config, theta0=theta0,
                 records={"out": background, "in": both}, contrib=contrib,
                 std={g.key: g.noise_std for g in plan.groups})


class _MemoEngine:
    """The engine, its result computed once per distinct batch (the weights never move here)."""

    def __init__(self, engine):
        self._engine, self._cache = engine, {}

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def compute(self, batch, clip_norms):
        key = tuple(batch["input_ids"].flatten().tolist())
        if key not in self._cache:
            self._cache[key] = self._engine.compute(batch, clip_norms)
        return self._cache[key]


def _flat(tensors: dict, slices, divide: float = 1.0) -> torch.Tensor:
    parts = []
    for sl in slices:
        t = tensors.get(sl.name)
        if t is None:
            continue
        parts.append((t if sl.index is None else t[sl.index]).detach().double().reshape(-1))
    return torch.cat(parts) / divide


def _run_once(loop: _Loop, world: str, generators: dict) -> tuple[list[dict], float]:
    """One short training run in ``world``: the released gradients of every step, and the
    trainer's own epsilon for the run."""
    from raptor.training.step.trainer import Trainer

    with torch.no_grad():
        for n, p in loop.engine.group_map.params.items():
            p.copy_(loop.theta0[n])
    trainer = Trainer(model=loop.model, engine=loop.engine, plan=loop.plan, train=loop.records[world],
                      validation=None, config=loop.config)
    trainer.generators = generators  # the audit's streams: they must be the ones that advance
    seen: list[dict] = []
    apply = trainer._apply

    def observe(grads, streams):  # the attacker reads what the optimizers receive
        seen.append({k: v.detach().clone() for k, v in grads.items()})
        apply(grads, streams)

    trainer._apply = observe
    for _ in range(loop.plan.steps):
        trainer.step()
    for n, p in loop.engine.group_map.params.items():
        if not torch.equal(p.detach(), loop.theta0[n]):
            raise ConfigError(f"parameter {n} moved during the audit's run; the white-box means (and the "
                              "engine cache) assume a learning rate too small to change a float32 weight")
    return seen, trainer.epsilon_spent()


def _whitened(loop: _Loop, released: dict) -> dict:
    slices = loop.engine.group_map.groups
    return {g.key: _flat(released, slices[g.key]) / loop.std[g.key] for g in loop.plan.groups}


def _likelihood(loop: _Loop, ys: list[dict], q: float) -> float:
    """log p_in / p_out of the run's releases (independent steps; per step a Poisson mixture)."""
    a = torch.cat([loop.contrib["b"][k] / loop.std[k] for k in loop.std])
    c = torch.cat([loop.contrib["c"][k] / loop.std[k] for k in loop.std])
    lw = {0: math.log1p(-q), 1: math.log(q)}
    total = 0.0
    for y in ys:
        v = torch.cat([y[k] for k in loop.std])
        terms = {(i, j): lw[i] + lw[j] - 0.5 * float((v - i * a - j * c).pow(2).sum()) for i in (0, 1) for j in (0, 1)}
        log_in = float(torch.logsumexp(torch.tensor(list(terms.values())), 0))
        log_out = float(torch.logsumexp(torch.tensor([terms[(0, 0)] - lw[0], terms[(1, 0)] - lw[0]]), 0))
        total += log_in - log_out
    return total


def _repeat(loop: _Loop, ys: list[dict]) -> float:
    """max over consecutive steps and streams of log(fit without the canary) - log(fit with it)."""
    best = -math.inf
    for stream in ("shared", "expert"):
        keys = [g.key for g in loop.plan.groups if g.stream == stream]
        if not keys:
            continue
        a = torch.cat([loop.contrib["b"][k] / loop.std[k] for k in keys])
        c = torch.cat([loop.contrib["c"][k] / loop.std[k] for k in keys])
        tiny = 1e-10 * a.numel()
        for t in range(len(ys) - 1):
            d = torch.cat([ys[t][k] - ys[t + 1][k] for k in keys])
            without = min(float((d - i * a).pow(2).sum()) for i in (-1, 0, 1))
            with_c = min(float((d - i * a - j * c).pow(2).sum()) for i in (-1, 0, 1) for j in (-1, 1))
            best = max(best, math.log(without + tiny) - math.log(with_c + tiny))
    return best


def run_trainer_loop_audit(cfg: TrainerLoopAuditConfig = TrainerLoopAuditConfig()) -> TrainerLoopAuditResult:
    """Audit ``steps`` updates of the real trainer loop against the trainer's ledger (module docstring)."""
    started = time.perf_counter()
    loop = _setup(cfg)
    generators = {"sample": torch.Generator().manual_seed(cfg.seed + 10),
                  "noise": torch.Generator().manual_seed(cfg.seed + 11)}
    scores: dict[str, dict[str, list[float]]] = {"likelihood": {}, "repeat": {}}
    claims = set()
    for half in ("fit", "eval"):
        for world in ("in", "out"):
            for _ in range(cfg.runs):
                released, eps = _run_once(loop, world, generators)
                claims.add(eps)
                ys = [_whitened(loop, r) for r in released]
                scores["likelihood"].setdefault(f"{half}-{world}", []).append(_likelihood(loop, ys, cfg.sample_rate))
                scores["repeat"].setdefault(f"{half}-{world}", []).append(_repeat(loop, ys))
    claim = max(claims)  # every run records the same events; the largest claim is the hardest to beat
    bounds, panels = {}, {}
    for name, s in scores.items():
        arr = {k: np.asarray(v) for k, v in s.items()}
        arr = {k: np.where(np.isfinite(v), v, -1e300) for k, v in arr.items()}
        bounds[name] = threshold_audit(arr["fit-in"], arr["fit-out"], arr["eval-in"], arr["eval-out"],
                                       delta=cfg.delta, significance=cfg.significance / 2.0,
                                       min_errors=MIN_ERRORS if name == "likelihood" else 0)
        panels[name] = (arr["eval-in"], arr["eval-out"])
    ledger = loop.plan.new_ledger()
    for t in range(loop.plan.steps):
        step = loop.plan.step(t)
        ledger.record(step.sample_rate, step.ledger_sigma, 1, step.phase)
    return TrainerLoopAuditResult(config=cfg, claimed_epsilon=claim, plan_epsilon=float(ledger.epsilon(cfg.delta)),
                                  bounds=bounds,
                                  seconds=time.perf_counter() - started, scores=panels)
