"""A one-run audit of a whole ``raptor train`` run (Steinke, Nasr & Jagielski, NeurIPS 2023).

1. Build the run exactly as ``raptor train`` does (same flags, loaders, model, method, plan).
2. Draw m canaries: records of random tokens with random labels (input-space canaries), each
   included in the private training set independently with probability 1/2 (a seeded audit
   generator, independent of the run's own randomness).
3. Train with the real mechanism (the run's trainer: Poisson sampling, clipping, noise, ledger).
4. Score every canary, included or not:
   * ``loss``: minus the canary's cross-entropy under the final model (black-box);
   * ``gradient``: the alignment of the released change of the weights with the canary's
     gradient at the initial model, ``-<theta_T - theta_0, g_c> / ||g_c||`` (white-box: the
     threat model makes the pre-trained model and the released weights public).
5. The one-run epsilon lower bound of each score (:func:`raptor.audit.bounds.one_run_epsilon`)
   next to the run's accounted epsilon, at the run's delta.

What it shows: a lower bound with confidence 1 - significance that any correct (eps, delta)
claim must exceed. With one run and a few thousand canaries the bound is far below a realistic
claim even for a correct mechanism (the paper's figures are similar): a bound above the claim
is a bug, a bound below it is not a proof of privacy. These input-space canaries have almost no
power (bound 0.21 at eps 50).

``canary_kind="dirac"`` (``raptor audit one-run --canary-kind dirac``) is the audit with power:
white-box gradient canaries on coordinates no real record touches, through the run's real release
path, scored from each step's release (:mod:`raptor.audit.dirac`).

Privacy: canaries are synthetic; the audit reports only canary scores and the run's public results.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from raptor.audit.bounds import OneRunBound, one_run_epsilon
from raptor.errors import ConfigError

#: Flags that make the default one-run audit a few minutes on two CPU cores (bundled SST-2 sample,
#: tiny Switch model). Any ``raptor train`` flag given by the user overrides these.
QUICK_TRAIN_ARGS = ("--model", "switch_transformers", "--set", "data.max_train_samples=4000", "--set", "data.max_eval_samples=500", "--batch-size", "256",
                    "--epochs", "3", "--max-length", "32", "--lr", "3e-3")
#: The Dirac canaries' default run (``--canary-kind dirac``): the canaries cost no model compute, so
#: few real records and many canaries (:data:`DIRAC_CANARIES`); 10 updates at the audit's sample rate.
DIRAC_TRAIN_ARGS = ("--model", "switch_transformers", "--set", "data.max_train_samples=200", "--set", "data.max_eval_samples=200", "--steps", "10",
                    "--max-length", "32", "--lr", "3e-3", "--set", "performance.micro_batch_size=1024")
DIRAC_CANARIES = 50_000
CANARY_KINDS = ("input", "dirac")


@dataclass(frozen=True)
class OneRunConfig:
    method: str = "raptor"
    canaries: int = 1000
    epsilon: float = 8.0
    significance: float = 0.05
    audit_seed: int = 0                     # the canaries and their coin flips (not the run's randomness)
    train_args: tuple[str, ...] = QUICK_TRAIN_ARGS
    output_dir: str = "runs/audit-one-run"
    canary_kind: str = "input"              # "input" records (black-box) or "dirac" gradient canaries
    sample_rate: float | None = None        # dirac: the run's Poisson rate q over records + canaries

    def __post_init__(self) -> None:
        if self.canaries < 10:
            raise ConfigError(f"--canaries must be >= 10, got {self.canaries}")
        if self.canary_kind not in CANARY_KINDS:
            raise ConfigError(f"--canary-kind must be one of {', '.join(CANARY_KINDS)}, got {self.canary_kind!r}")
        if self.sample_rate is not None:
            if self.canary_kind != "dirac":
                raise ConfigError("--sample-rate is for --canary-kind dirac; with input canaries give --batch-size "
                                  "after --")
            if not 0.0 < self.sample_rate < 1.0:  # B < N (raptor.training.config.check_batch_size)
                raise ConfigError(f"--sample-rate must be in (0, 1), got {self.sample_rate}")
        if not 0.0 < self.significance < 0.5:
            raise ConfigError(f"significance must be in (0, 0.5) (raptor audit --confidence in (0.5, 1)), got {self.significance}")


@dataclass
class OneRunResult:
    config: OneRunConfig
    claimed_epsilon: float
    delta: float
    bounds: dict[str, OneRunBound]
    included: int
    train_records: int
    final_accuracy: float | None
    randomness: str
    seconds: float
    scores: dict[str, tuple[np.ndarray, np.ndarray]] = field(repr=False)  # name -> (in, out)
    extra: dict = field(default_factory=dict)  # dirac: the canaries' group, released steps, q, T, sigma

    def to_dict(self) -> dict:
        return {
            "audit": "one-run", "canary_kind": self.config.canary_kind, **self.extra,
            "method": self.config.method, "claimed_epsilon": self.claimed_epsilon,
            "delta": self.delta, "confidence": 1.0 - self.config.significance,
            "epsilon_lower_bound": {k: b.epsilon for k, b in self.bounds.items()},
            "bounds": {k: b.to_dict() for k, b in self.bounds.items()},
            "canaries": self.config.canaries, "included": self.included,
            "train_records": self.train_records, "final_accuracy": self.final_accuracy,
            "randomness": self.randomness, "seconds": self.seconds, "config": asdict(self.config),
        }


def _canaries(m: int, vocab: int, length: int, num_labels: int, gen: torch.Generator, pad_ok: int = 5):
    ids = torch.randint(pad_ok, vocab, (m, length), generator=gen)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
            "labels": torch.randint(0, num_labels, (m,), generator=gen)}


def _cat(a: dict, b: dict) -> dict:
    return {k: torch.cat([a[k], b[k].to(a[k].dtype)]) for k in a}


def _per_record_loss(model, records: dict, device) -> torch.Tensor:
    from raptor.training.step.plain import classification_logits

    out = []
    with torch.no_grad():
        for s in range(0, int(records["labels"].shape[0]), 256):
            batch = {k: v[s:s + 256].to(device) for k, v in records.items()}
            logits = classification_logits(model, batch).float()
            out.append(torch.nn.functional.cross_entropy(logits, batch["labels"], reduction="none").cpu())
    return torch.cat(out)


def _gradients(model, params: dict, records: dict, device) -> list[dict]:
    """Each canary's loss gradient w.r.t. the trainable parameters (one record at a time, plain autograd)."""
    from raptor.training.step.plain import classification_logits

    names = list(params)
    out = []
    for r in range(int(records["labels"].shape[0])):
        one = {k: v[r:r + 1].to(device) for k, v in records.items()}
        loss = torch.nn.functional.cross_entropy(classification_logits(model, one).float(), one["labels"])
        grads = torch.autograd.grad(loss, [params[n] for n in names], allow_unused=True)
        out.append({n: g.detach().clone() for n, g in zip(names, grads) if g is not None})
    return out


@dataclass
class RunInputs:
    """Everything ``raptor train`` builds before training, for the audit to add canaries to.

    ``raptor.cli.audit.load_run_inputs`` makes it from ``raptor train`` flags (same loaders, model
    and config as a real run)."""

    config: object            # TrainConfig
    model: torch.nn.Module
    vocab_size: int
    max_length: int
    num_labels: int
    train: dict
    public: dict
    validation: dict | None


def run_one_run_audit(cfg: OneRunConfig, inputs: RunInputs, *, progress: bool = False) -> OneRunResult:
    """Train once with canaries and return the one-run bounds (see the module docstring; Dirac
    canaries: :mod:`raptor.audit.dirac`)."""
    from raptor.training.run.assemble import assemble_run

    if cfg.canary_kind == "dirac":
        from raptor.audit.dirac import run_dirac

        return OneRunResult(config=cfg, **run_dirac(cfg, inputs, progress=progress))

    started = time.perf_counter()
    config, train = inputs.config, inputs.train
    gen = torch.Generator().manual_seed(cfg.audit_seed)
    canaries = _canaries(cfg.canaries, inputs.vocab_size, inputs.max_length, inputs.num_labels, gen)
    included = torch.rand(cfg.canaries, generator=gen) < 0.5
    train_all = _cat(train, {k: v[included] for k, v in canaries.items()})
    trainer = assemble_run(config, inputs.model, train=train_all, validation=inputs.validation,
                            public=inputs.public)
    device = trainer.device
    theta0 = {n: p.detach().clone() for n, p in trainer.params.items()}
    grads = _gradients(trainer.model, trainer.params, canaries, device)   # at theta_0, before training
    results = trainer.fit(progress=progress)
    loss = _per_record_loss(trainer.model, canaries, device)
    change = {n: p.detach() - theta0[n] for n, p in trainer.params.items()}
    align = torch.tensor([-sum(float((change[n] * g[n]).sum()) for n in g)
                          / max(math.sqrt(sum(float(g[n].pow(2).sum()) for n in g)), 1e-30) for g in grads])
    scores = {"loss": -loss.double().numpy(), "gradient": align.double().numpy()}
    inc = included.numpy()
    delta = float(results["delta"])
    bounds = {k: one_run_epsilon(s[inc], s[~inc], significance=cfg.significance, delta=delta) for k, s in scores.items()}
    return OneRunResult(config=cfg, claimed_epsilon=float(results["epsilon"]), delta=delta, bounds=bounds,
                        included=int(inc.sum()), train_records=trainer.num_records,
                        final_accuracy=results["final_accuracy"],
                        randomness=trainer.randomness, seconds=time.perf_counter() - started,
                        scores={k: (s[inc], s[~inc]) for k, s in scores.items()})
