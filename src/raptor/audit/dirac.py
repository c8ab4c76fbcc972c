"""White-box Dirac canaries for the one-run audit (Steinke, Nasr & Jagielski, NeurIPS 2023, section 6).

A Dirac canary is a record whose per-record gradient is ``G e_c``: a one-hot vector of norm
``G = DIRAC_NORM_FACTOR * C_g`` (above the clip norm) on its own coordinate ``c``, a coordinate no
real record touches. The coordinates are those of one dedicated parameter, :data:`DIRAC_PARAM`
(one scalar per canary), that the audit adds to one released group of the run's gradient engine
(:class:`DiracCanaryEngine`, the clearly-named audit hook). The model's forward never reads it,
so every real record's gradient on it is exactly 0; the canary records give nothing to the model's
own parameters.

Everything after the engine is the run's real release path, unchanged:
:meth:`raptor.training.step.trainer.Trainer.step` samples the canary records with the run's Poisson
sampler (they are records of the private set: N counts them, q = B/N), the hook clips each
sampled canary's gradient to ``C_g`` with the engine's rule ``min(1, C_g / ||g||)`` and adds it
to the clipped sums, ``release_gradients`` adds the group's noise ``N(0, sigma_g^2 C_g^2)`` from
the run's noise generator and divides by ``n_hat_g``, and the trainer records the step in its
ledger. The claim is the trainer's own epsilon at its delta.

Scoring (white-box: the released gradients are what the Gaussian mechanism publishes). The
attacker reads each step's release of the canary parameter (what the optimizer receives) and
scores canary c with ``sum_t y_t[c] n_hat_g / C_g``, the released noisy coordinate summed over the
steps (in units of the clip norm: about the number of steps that sampled the canary, plus noise).
The k+ highest scores are guessed "in", the k- lowest "out"; the right guesses give the bound of
:func:`raptor.audit.bounds.one_run_epsilon_two_sided`.

What it does NOT exercise: the engine's per-record gradients and clipping of real records (the
mechanism audit's subject), the model, and the group's other coordinates. A Dirac canary lives
in one group only, so it spends only that group's share of a multi-stream step: the bound it can
show is that of the group's sigma_g, below the joint claim (the claim still has to exceed it).

Privacy: canaries are synthetic; nothing here reads a real record's gradient or statistic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from raptor.errors import ConfigError

#: Name of the dedicated parameter (one coordinate per canary) added to the audited group.
DIRAC_PARAM = "audit.dirac_canaries"
#: Column of the audit's records: the canary index of a canary record, -1 for a real record.
CANARY_COLUMN = "audit_canary"
#: A canary's gradient norm, in units of its group's clip norm (> 1: the clip applies).
DIRAC_NORM_FACTOR = 2.0


@dataclass
class DiracResult:
    """What the trainer reads from one ``compute`` call (the engine's fields it uses)."""

    clipped_sums: dict
    num_nonfinite: int


class DiracCanaryEngine:
    """AUDIT HOOK. The run's engine for the real records of a batch, plus each sampled Dirac canary's
    clipped gradient on its own coordinate of :data:`DIRAC_PARAM` (a parameter of group ``group``)."""

    def __init__(self, engine, group, canaries: int, device):
        from raptor.roles.groups import GroupMap, ParamSlice

        if group not in engine.group_map.groups:
            raise ConfigError(f"group {group} is not a group of the run's engine")
        if DIRAC_PARAM in engine.group_map.params:
            raise ConfigError(f"the engine already has a parameter named {DIRAC_PARAM!r}")
        self._engine, self.group, self.canaries = engine, group, int(canaries)
        self.param = torch.nn.Parameter(torch.zeros(self.canaries, dtype=torch.float32, device=device))
        groups = {k: (v + (ParamSlice(DIRAC_PARAM),) if k == group else v) for k, v in engine.group_map.groups.items()}
        self.group_map = GroupMap(groups=groups, params={**engine.group_map.params, DIRAC_PARAM: self.param})

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def compute(self, batch, clip_norms):
        if CANARY_COLUMN not in batch:  # not the audit's records (e.g. a memory probe): the engine alone
            return self._engine.compute(batch, clip_norms)
        ids = batch[CANARY_COLUMN]
        real = ids < 0
        rest = {k: v for k, v in batch.items() if k != CANARY_COLUMN}
        sums, nonfinite = {}, 0
        if bool(real.any()):
            result = self._engine.compute(rest if bool(real.all()) else {k: v[real] for k, v in rest.items()},
                                          clip_norms)
            sums, nonfinite = dict(result.clipped_sums), int(result.num_nonfinite)
            if DIRAC_PARAM in sums:
                raise ConfigError(f"a real record has a gradient on {DIRAC_PARAM!r}; the canary coordinates "
                                  "must be untouched by real records")
        sampled = ids[~real]
        if sampled.numel():
            clip = float(clip_norms[self.group])
            norm = DIRAC_NORM_FACTOR * clip                     # ||G e_c||
            factor = clip / norm if norm > clip else 1.0        # the engine's rule: min(1, C_g / ||g||)
            total = torch.zeros(self.canaries, dtype=torch.float32, device=self.param.device)
            total.index_add_(0, sampled.to(self.param.device),
                             torch.full((sampled.numel(),), norm * factor, dtype=torch.float32,
                                        device=self.param.device))
            sums[DIRAC_PARAM] = total
        return DiracResult(clipped_sums=sums, num_nonfinite=nonfinite)


def canary_group(plan):
    """The released group the canaries live in: the one with the smallest noise multiplier at
    update 0 (the most signal per canary; the first such group on a tie)."""
    groups = [g for g in plan.step(0).groups if g.sigma > 0]
    if not groups:
        raise ConfigError("the run releases no noised group at its first update: nothing to audit "
                          "(use a private --method)")
    return min(groups, key=lambda g: g.sigma).key


def records_with_canaries(train: dict, included: torch.Tensor) -> dict:
    """The private records followed by the included canaries' records: each canary's input is
    padding (the hook never passes it to the model), its :data:`CANARY_COLUMN` entry its index."""
    n = int(train["labels"].shape[0])
    idx = torch.nonzero(included).flatten()
    k = int(idx.numel())
    out = {}
    for name, v in train.items():
        if name == CANARY_COLUMN:
            raise ConfigError(f"the training records already have a {CANARY_COLUMN!r} column")
        out[name] = torch.cat([v, torch.zeros((k, *v.shape[1:]), dtype=v.dtype, device=v.device)])
    out[CANARY_COLUMN] = torch.cat([torch.full((n,), -1, dtype=torch.long), idx.to(torch.long)])  # CPU, as records are
    return out


def run_dirac(cfg, inputs, *, progress: bool = False) -> dict:
    """Train once with Dirac canaries (module docstring); returns the fields of a
    :class:`raptor.audit.one_run.OneRunResult` but its config, with the ``dirac`` score's bound
    (``cfg``: a :class:`~raptor.audit.one_run.OneRunConfig`, ``inputs`` its ``RunInputs``)."""
    import time

    from raptor.audit.bounds import one_run_epsilon_two_sided
    from raptor.training.run.assemble import assemble_run
    from raptor.training.step.trainer import Trainer

    started = time.perf_counter()
    gen = torch.Generator().manual_seed(cfg.audit_seed)
    included = torch.rand(cfg.canaries, generator=gen) < 0.5
    train = records_with_canaries(inputs.train, included)
    n_total = int(train["labels"].shape[0])
    config = inputs.config
    if cfg.sample_rate is not None:
        config = replace(config, batch_size=max(1, round(cfg.sample_rate * n_total)))
    base = assemble_run(config, inputs.model, train=train, validation=inputs.validation, public=inputs.public)
    key = canary_group(base.plan)
    engine = DiracCanaryEngine(base.engine, key, cfg.canaries, base.device)
    trainer = Trainer(model=base.model, engine=engine, plan=base.plan, train=train, validation=inputs.validation,
                      config=base.config, extra_results=base.extra_results, evaluator=base.evaluator,
                      comm=base.comm)
    score = torch.zeros(cfg.canaries, dtype=torch.float64)
    observed = []
    apply = trainer._apply

    def observe(grads, streams):  # the attacker reads each step's release (what the optimizers receive)
        y = grads.get(DIRAC_PARAM)
        if y is not None:
            rel = next(g for g in trainer.plan.step(trainer.state.step).groups if g.key == key)
            score.add_(y.detach().double().cpu() * (rel.denominator / rel.clip_norm))
            observed.append(trainer.state.step)
        apply(grads, streams)

    trainer._apply = observe
    results = trainer.fit(progress=progress)
    if not observed:
        raise ConfigError(f"group {key} was never released: the Dirac canaries saw no update")
    s, inc = score.numpy(), included.numpy()
    if not np.all(np.isfinite(s)):
        raise ConfigError("a released canary coordinate is not finite")
    delta = float(results["delta"])
    bound = one_run_epsilon_two_sided(s, inc, significance=cfg.significance, delta=delta)
    claim = float(results["epsilon"])
    if not math.isfinite(claim):
        raise ConfigError("the run's epsilon is infinite (an unaccounted step): nothing to compare with")
    return dict(claimed_epsilon=claim, delta=delta, bounds={"dirac": bound}, included=int(inc.sum()),
                train_records=trainer.num_records, final_accuracy=results["final_accuracy"],
                randomness=trainer.randomness, seconds=time.perf_counter() - started,
                scores={"dirac": (s[inc], s[~inc])},
                extra={"canary_group": str(key), "released_steps": len(observed),
                       "sample_rate": trainer.plan.sample_rate, "steps": trainer.plan.steps,
                       "sigma_canary_group": next(g.sigma for g in trainer.plan.step(0).groups if g.key == key)})
