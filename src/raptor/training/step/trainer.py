"""The RAPTOR trainer: Poisson sampling, per-group clipped sums, noise, public denominators,
one optimizer per stream, the ledger advanced every step.

One update t (METHOD.md, "One update"):

1. sample S_t = {i : U_i < q} (possibly empty) from the sampling generator;
2. clipped sums per group from the engine, accumulated over micro-batches of S_t;
3. release the groups the step plan lists for update t: (sum + N(0, sigma_g^2 C_g^2 I)) / n_g, with
   n_g = B for the shared/dense group and the public n_hat_{l,e} for experts
   (:mod:`raptor.training.step.plan`, :mod:`raptor.training.step.release`);
   every expert of a trained layer steps on every planned update, owners sampled or not;
4. record the step in the ledger (after checking that it fits the budget), step the stream
   optimizers of the phase.

Nothing branches on or scales by |S_t| or realized owner counts, and no statistic of the private
batch is shown, logged or saved. (The number of micro-batches, hence the step's wall time,
grows with |S_t|, as in every DP-SGD implementation; timing side channels are outside the
threat model, and seconds/step is reported only as an average over the run.) In particular the TRAINING LOSS is not displayed: the loss on a
private batch is itself a private statistic. The progress bar shows the dev loss and the task's
main metric (accuracy, F1, Matthews or Pearson correlation: :mod:`raptor.evaluation`) measured at
evaluation points (validation split(s), natural routing) and the epsilon spent so far; each
evaluation point stores every metric of the task.

Diagnostic, stated honestly: the number of records whose per-record gradient was non-finite
(zeroed before aggregation, house rule 4) is counted and reported in results; it is a count over
private records that is NOT protected by DP, 0 in a healthy run.

Randomness: two generators from the run's :class:`~raptor.mechanisms.GeneratorSpec` (``mechanism``):
"sample" (Poisson sampling, CPU) and "noise" (Gaussian noise, on the training device); AES-256-CTR
streams in secure mode, seeded torch generators (NOT secure) with a seed. results.json says which
under "randomness".

Dropout stays off (the model is kept in eval mode): it would draw from torch's global RNG.

Legend: N private records, S sampled records, T tokens, B expected batch size.
"""

from __future__ import annotations

import math
import resource
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from raptor.errors import BudgetExceededError, ConfigError, RaptorWarning
from raptor.mechanisms import GeneratorSpec
from raptor.training.config import TrainConfig
from raptor.training.run.distributed import Communicator, SingleProcess
from raptor.training.saving.checkpoint import load_checkpoint, save_checkpoint
from raptor.training.step.master_weights import master_copies, with_master_weights
from raptor.training.step.micro_batch import length_sorted_chunks, trim_padding, trimmable
from raptor.training.step.plan import StepPlan
from raptor.training.step.protocols import GradientEngine, Ledger
from raptor.training.step.release import release_gradients

Records = Mapping[str, torch.Tensor]  # input_ids [N,T], attention_mask [N,T], labels [N]


def _jsonish(obj):
    """``obj`` as it reads back from JSON (tuples as lists, keys as strings, inf as a float)."""
    import json

    return json.loads(json.dumps(obj, default=str))


def make_optimizer(params: list[nn.Parameter], config, lr: float) -> torch.optim.Optimizer:
    """AdamW (betas, eps, weight decay from ``config``) or SGD (momentum, weight decay)."""
    if config.name == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=config.betas, eps=config.eps, weight_decay=config.effective_weight_decay)
    return torch.optim.SGD(params, lr=lr, momentum=config.momentum, weight_decay=config.effective_weight_decay)


@dataclass
class TrainState:
    """Counters of a run (all public except ``nonfinite_records``, see the module docstring)."""

    step: int = 0
    unaccounted_steps: int = 0
    nonfinite_records: int = 0
    evals: list = field(default_factory=list)
    step_seconds: float = 0.0


class Trainer:
    """Runs a planned number of DP updates of ``model`` on the private ``train`` records."""

    def __init__(
        self,
        *,
        model: nn.Module,
        engine: GradientEngine,
        plan: StepPlan,
        train: Records,
        validation: Records | None,
        config: TrainConfig,
        ledger: Ledger | None = None,
        extra_results: dict | None = None,
        evaluator=None,
        comm: Communicator | None = None,
    ):
        """``plan`` is the only source of what is released and recorded; ``ledger`` defaults to
        ``plan.new_ledger()`` (None for a non-private plan). ``comm``: the data-parallel
        communicator of a torchrun job (:mod:`raptor.training.run.distributed`; default one process)."""
        self.comm = comm if comm is not None else SingleProcess()
        self.model, self.engine, self.train, self.validation = model, engine, train, validation
        self.plan, self.config = plan, config
        self.ledger = plan.new_ledger() if ledger is None else ledger
        self.extra_results = extra_results or {}
        self.num_records = int(train["labels"].shape[0])
        self.device = torch.device(config.performance.device)
        self.evaluator = evaluator if evaluator is not None else self._default_evaluator(validation)
        spec = GeneratorSpec(secure=config.privacy.secure_rng, seed=config.seed)
        self.generators = self.comm.generators(spec, self.device)  # {"sample", "noise"}, shared sampler on W ranks
        self.randomness = spec.describe()
        self.epsilon_budget = plan.epsilon_budget
        self.delta = plan.delta
        self.params = dict(engine.group_map.params)
        self.slices_of = dict(engine.group_map.groups)
        self.masters = master_copies(self.params)  # float32 copies of bf16/fp16 params (the optimizers step them)
        self._names = {id(p): n for n, p in self.masters.items()}
        self.optimizers = self._make_optimizers()
        self.state = TrainState()
        self.artifacts: dict = {}  # extra checkpoint files: the initial weights and the tokenizer (fine_tune)
        self.fingerprint: dict = {}  # what a resumed run must share (raptor.training.saving.fingerprint)
        self.micro_batch = None
        self.micro_batch_size = config.performance.micro_batch_size
        # tokens per record: micro-batches of a sampled batch are length-sorted and trimmed (less padding)
        self._lengths = train["attention_mask"].sum(dim=1) if trimmable(train) else None
        if config.performance.memory_budget_mib is not None:
            from raptor.training.step.micro_batch import choose_micro_batch_size

            self.micro_batch = choose_micro_batch_size(
                engine, seq_len=config.max_length, vocab_size=int(model.config.vocab_size),
                budget_mib=config.performance.memory_budget_mib, device=self.device)
            self.micro_batch_size = self.micro_batch.size
            self.extra_results["micro_batch"] = self.micro_batch.to_dict()
        if self.ledger is not None and len(self.ledger) != 0:
            raise ConfigError("Trainer needs an empty ledger; resume a run with Trainer.resume(checkpoint)")

    def _make_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        names: dict[str, dict[str, None]] = {}
        for rel in self.plan.groups:
            for sl in self.slices_of[rel.key]:
                names.setdefault(rel.stream, {})[sl.name] = None
        owner = {}
        for stream, ns in names.items():
            for n in ns:
                if owner.setdefault(n, stream) != stream:
                    raise ConfigError(f"parameter {n} is in groups of two streams ({owner[n]}, {stream})")
        opt = self.config.optim
        lrs = {"shared": opt.lr, "expert": opt.lr_expert or opt.lr}
        return {s: with_master_weights(make_optimizer([self.masters[n] for n in ns], opt, lrs[s]),
                                       [(self.masters[n], self.params[n]) for n in ns]) for s, ns in names.items()}

    @property
    def sample_rate(self) -> float:
        return self.plan.sample_rate

    # ------------------------------------------------------------------ one update
    def step(self) -> None:
        """One planned update (reads top to bottom)."""
        step = self.plan.step(self.state.step)  # released groups (stream, C_g, sigma_g, n_hat_g), ledger event
        if step.accounted and self.epsilon_budget is not None:
            self.ledger.check_can_record(step.sample_rate, step.ledger_sigma, 1, self.epsilon_budget, self.delta)
        idx_S = self.comm.sample(self.num_records, step.sample_rate, self.generators["sample"])  # private: gather only
        sums, nonfinite = self._clipped_sums(idx_S)
        grads = release_gradients(sums, self.slices_of, self.params, self.comm.local_groups(step.groups),
                                  self.generators["noise"])  # W ranks: the noise on rank 0 only
        grads, nonfinite = self.comm.all_reduce_grads(grads, nonfinite)  # one collective
        self.state.nonfinite_records += nonfinite
        if step.accounted:
            self.ledger.record(step.sample_rate, step.ledger_sigma, 1, step.phase)
        else:
            self.state.unaccounted_steps += 1
        self._apply(grads, step.streams)
        self.state.step = step.t + 1

    def _clipped_sums(self, idx_S: torch.Tensor) -> tuple[dict[str, torch.Tensor], int]:
        """(sum of the engine's clipped sums over micro-batches of the sampled records, how many of
        those records had a non-finite gradient, zeroed by the engine; not DP, a diagnostic)."""
        sums: dict[str, torch.Tensor] = {}
        nonfinite = 0
        for chunk in length_sorted_chunks(idx_S, self._lengths, self.micro_batch_size):
            batch = {k: v[chunk] for k, v in self.train.items()}
            if self._lengths is not None:
                batch = trim_padding(batch)
            batch = {k: v.to(self.device) for k, v in batch.items()}
            result = self.engine.compute(batch, self.plan.clip_norms)
            nonfinite += int(result.num_nonfinite)
            for name, s in result.clipped_sums.items():
                sums[name] = s if name not in sums else sums[name] + s
        return sums, nonfinite

    def _apply(self, grads: Mapping[str, torch.Tensor], streams: tuple[str, ...]) -> None:
        for stream, opt in self.optimizers.items():
            if stream not in streams:
                continue
            for group in opt.param_groups:
                for p in group["params"]:
                    p.grad = grads[self._names[id(p)]]
            opt.step()
            opt.zero_grad(set_to_none=True)

    # ------------------------------------------------------------------ evaluation
    def _default_evaluator(self, validation: Records | None):
        """Accuracy (Pearson/Spearman for a one-output head) on ``validation``; ``None`` without one."""
        if validation is None:
            return None
        from raptor.per_sample.task_losses import task_type_of
        from raptor.training.evaluator import Evaluator

        return Evaluator({"dev": validation}, task_type=task_type_of(self.model),
                         batch_size=self.config.performance.eval_batch_size, device=self.device, comm=self.comm)

    def evaluate(self) -> dict:
        """The task's metrics on the validation split(s) with natural routing (see
        :class:`raptor.training.evaluator.Evaluator`): ``metrics``, ``main_metric``, ``dev_loss``, ``accuracy``.

        Without a validation split every field is ``None`` (``metrics`` empty). The validation split
        is evaluation data, not the private training set, so its loss may be shown (the training
        loss may not).
        """
        if self.evaluator is None:
            return {"metrics": {}, "main_metric": None, "dev_loss": None, "accuracy": None}
        return self.evaluator(self.model)

    def epsilon_spent(self) -> float:
        """epsilon at delta for the executed steps (inf if any step was not accounted)."""
        if self.state.unaccounted_steps or self.ledger is None:
            return math.inf if self.state.step else 0.0
        return float(self.ledger.epsilon(self.delta)) if len(self.ledger) else 0.0

    # ------------------------------------------------------------------ the loop
    def fit(self, *, progress: bool = True, checkpoint_every: int = 0, checkpoint_start: bool = False) -> dict:
        """Run the remaining planned updates, evaluating every ``eval_every`` steps and at the end.

        Checkpoints go to ``config.output_path / "checkpoint"``: every ``checkpoint_every`` steps,
        and with ``checkpoint_start`` before the first update of a new run (a run killed before its
        first periodic checkpoint still resumes exactly). A step that would exceed the budget
        (:class:`BudgetExceededError`) saves a checkpoint first when checkpointing is on, evaluates
        the model as saved (unless this step was just evaluated), then raises with ``err.results``
        holding :meth:`results` (``final_metrics``: that evaluation).
        """
        from tqdm.auto import tqdm

        total = self.plan.steps
        every = self.config.eval_every
        checkpointing = bool(checkpoint_every or checkpoint_start)
        if checkpoint_start and self.state.step == 0:
            self.save(self.config.output_path / "checkpoint")
        bar = tqdm(total=total, initial=self.state.step, disable=not progress, desc=self.config.method)
        while self.state.step < total:
            start = time.perf_counter()
            try:
                self.step()
            except BudgetExceededError as err:  # save the work first, then stop
                bar.close()
                if checkpointing:
                    self.save(self.config.output_path / "checkpoint")
                if not self.state.evals or self.state.evals[-1]["step"] != self.state.step:
                    self._evaluation_point()  # the model as saved: results carry its dev metrics
                err.results = self.results()
                raise
            self.state.step_seconds += time.perf_counter() - start
            t = self.state.step
            if (every and t % every == 0) or t == total:
                point, eps = self._evaluation_point()
                main, dev_loss = point["main_metric"], point["dev_loss"]
                shown = {"dev_loss": "-" if dev_loss is None else f"{dev_loss:.3f}"}
                if main is not None:
                    shown[main] = f"{point['metrics'][main]:.3f}"
                bar.set_postfix(**shown, eps=f"{eps:.3g}")
            if checkpoint_every and t % checkpoint_every == 0 and t < total:
                self.save(self.config.output_path / "checkpoint")
            bar.update(1)
        bar.close()
        last = self.state.evals[-1] if self.state.evals else {}
        single = last.get("single_class")
        accuracy, majority = last.get("accuracy"), last.get("majority_class_accuracy")
        if single is not None and getattr(self.comm, "is_main", True):
            warnings.warn(RaptorWarning(f"the final model predicts class {single} for every dev record (a collapsed "
                                        "classifier: its accuracy is that class's share); try another optim.lr, "
                                        "privacy.clip_shared or more data"), stacklevel=2)
        elif accuracy is not None and majority is not None and accuracy < majority \
                and getattr(self.comm, "is_main", True):
            warnings.warn(RaptorWarning(f"the final dev accuracy {accuracy:.4f} is below the majority class's share "
                                        f"{majority:.4f}: always predicting the most frequent class would do better; "
                                        "try another optim.lr, privacy.clip_shared, privacy.epsilon or more data"),
                          stacklevel=2)
        return self.results()

    def _evaluation_point(self) -> tuple[dict, float]:
        """Evaluate the model now and append the point (step, metrics, epsilon) to ``state.evals``."""
        point = self.evaluate()
        eps = self.epsilon_spent()
        self.state.evals.append({"step": self.state.step, **point, "epsilon": eps})
        return point, eps

    def run_steps(self, count: int) -> None:
        """Exactly ``count`` more updates (no evaluation), never beyond the plan."""
        if self.state.step + count > self.plan.steps:
            raise BudgetExceededError(
                f"{count} more steps after step {self.state.step} would exceed the {self.plan.steps} planned steps"
            )
        for _ in range(count):
            self.step()

    def results(self) -> dict:
        """results.json content: config, evals, epsilon/delta from the ledger, sigmas, timing, memory."""
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out = {
            "config": self.config.to_dict(),
            "evals": self.state.evals,
            "final_accuracy": self.state.evals[-1]["accuracy"] if self.state.evals else None,
            "final_metrics": self.state.evals[-1]["metrics"] if self.state.evals else {},
            "single_class_prediction": self.state.evals[-1].get("single_class") if self.state.evals else None,
            "main_metric": self.evaluator.main_metric if self.evaluator is not None else None,
            "epsilon": self.epsilon_spent(),
            "delta": self.delta,
            "sigma": self.plan.sigmas,
            "plan": self.plan.noise.to_dict(),
            "steps": self.state.step,
            "sample_rate": self.sample_rate,
            "seconds_per_step": self.state.step_seconds / max(self.state.step, 1),
            "peak_rss_mib": peak_kib / 1024.0,
            "streams": self.plan.to_dict(),
            "nonfinite_records_diagnostic_not_dp": self.state.nonfinite_records,
            "randomness": self.randomness,
        }
        if torch.cuda.is_available() and self.device.type == "cuda":
            out["peak_cuda_mib"] = torch.cuda.max_memory_allocated(self.device) / 2**20
        out.update(self.extra_results)
        return out

    # ------------------------------------------------------------------ checkpoints
    def save(self, path) -> None:
        """Checkpoint: trainable params, optimizers (with bf16 runs' float32 master weights), ledger,
        generator states, step, config, the plan (public statistics), the fingerprint and
        :attr:`artifacts`. The generator states are kept in every checkpoint except the final one
        of a secure run (:mod:`raptor.training.saving.checkpoint`). On W ranks rank 0 writes (every rank
        holds the same state; its "noise" state is the run's) and every rank waits for it."""
        if not self.comm.is_main:
            self.comm.barrier()
            return
        final = self.state.step >= self.plan.steps
        save_checkpoint(
            path, model=self.model, optimizers=self.optimizers,
            ledger=self.ledger.to_dict() if self.ledger is not None else {},
            generators=self.generators, secure_rng=self.config.privacy.secure_rng, step=self.state.step,
            save_rng=not (self.config.privacy.secure_rng and final),
            config=self.config.to_dict(), fingerprint=self.fingerprint, artifacts=self.artifacts,
            extra={"unaccounted_steps": self.state.unaccounted_steps, "evals": self.state.evals,
                   "plan": self.plan.to_dict(),
                   "nonfinite_records": self.state.nonfinite_records, "step_seconds": self.state.step_seconds},
        )
        self.comm.barrier()

    def _check_state_form(self, path) -> TrainConfig:
        """The checkpoint's config, after checking that its ``state.json`` has what :meth:`resume` reads
        (every config field of this version, the counters, a step within the plan): a checkpoint of
        an older raptor version is a :class:`CheckpointError` naming the file, not a ``KeyError``."""
        from raptor.errors import CheckpointError
        from raptor.training.saving.checkpoint import STATE, read_state

        state = read_state(path)
        file = Path(state["path"]) / STATE
        now = self.config.to_dict()
        lacks = [f"config.{k}" for k in now if k not in state["config"]]
        lacks += [f"config.{k}.{f}" for k, v in now.items() if isinstance(v, dict)
                  and isinstance(state["config"].get(k), dict) for f in v if f not in state["config"][k]]
        lacks += [f"extra.{k}" for k in ("unaccounted_steps", "nonfinite_records", "evals", "step_seconds")
                  if k not in state["extra"]]
        what = f"it lacks {', '.join(lacks[:5])}{' and more' if len(lacks) > 5 else ''}" if lacks else None
        if what is None and state["step"] > self.plan.steps:
            what = f"its step {state['step']} is beyond this run's {self.plan.steps} planned updates"
        if what is None:
            try:
                return TrainConfig.from_dict(state["config"])
            except (ConfigError, TypeError, ValueError, KeyError) as err:
                what = f"its config does not fit this version ({err})"
        raise CheckpointError(f"{file}: {what}; the checkpoint was written by another raptor version or is damaged; "
                              "start a new run (or resume it with the raptor version that wrote it)")

    def resume(self, path, ledger_from_dict) -> None:
        """Continue from a checkpoint of the same run: same config (privacy and method), same
        fingerprint (:mod:`raptor.training.saving.fingerprint`), the same public statistics and plan (floats
        within a relative :data:`~raptor.training.saving.fingerprint.PLAN_REL_TOL`, so that a resume on
        another device is not refused for rounding; the run continues with its recomputed values), the
        saved ledger continued (``ledger_from_dict`` rebuilds it, e.g. ``PrivacyLedger.from_dict``)
        and the saved generator states."""
        from raptor.errors import CheckpointError

        if self.fingerprint:
            from raptor.training.saving.fingerprint import check_resumable

            check_resumable(path, self.fingerprint)  # before any file is loaded into this run
        saved = self._check_state_form(path)  # an older raptor's checkpoint: one line, before anything is loaded
        state = load_checkpoint(path, model=self.model, optimizers=self.optimizers, generators=self.generators,
                                ledger_from_dict=ledger_from_dict if self.ledger is not None else None)
        extra = state["extra"]
        saved_plan = extra.get("plan")
        if saved_plan is not None:
            from raptor.training.saving.fingerprint import PLAN_REL_TOL, plan_differences

            diff = plan_differences(_jsonish(saved_plan), _jsonish(self.plan.to_dict()))
            if diff:
                raise CheckpointError(f"--resume {path}: the plan and public statistics (owner shares, n_hat, clip "
                                      "norms, chosen layers, sigmas) of this run differ from the saved ones beyond a "
                                      f"relative {PLAN_REL_TOL:g} ({'; '.join(diff)}), so it would not continue the "
                                      "same run; resume with the same model, data and settings")
        if self.config.privacy.secure_rng and not state["rng_saved"] and state["step"] < self.plan.steps:
            raise CheckpointError(f"--resume {path}: the checkpoint holds no generator state, so the run cannot "
                                  "continue exactly")
        if saved.privacy != self.config.privacy or saved.method != self.config.method \
                or saved.batch_size != self.config.batch_size:
            raise ConfigError(f"checkpoint {path} was written by a run with a different method, batch size or "
                              "privacy config; resume with the same settings")
        if self.ledger is not None:
            self.ledger = state["ledger_object"]
        self.state = TrainState(step=state["step"], unaccounted_steps=extra["unaccounted_steps"],
                                nonfinite_records=extra["nonfinite_records"], evals=list(extra["evals"]),
                                step_seconds=extra["step_seconds"])
