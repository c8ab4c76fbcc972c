"""One private run driven from outside raptor's loop: the stages of ``Trainer.step``, called in turn.

:class:`PrivateRun` wraps a :class:`raptor.training.step.trainer.Trainer` built by
:func:`raptor.training.run.assemble.build_trainer` (the one composition root: public stage, trained
layers, trainable set, engine, noise plan, step plan). The trainer's ``step()`` does, for update t:
the budget check, the Poisson sample, the clipped sums, the release, the ledger event, the
optimizer update. An outside loop needs those stages at three points of its own code, so this
class exposes them one at a time, on the trainer's own plan, generators, ledger and state:

1. :meth:`begin` (the Poisson loader's ``next``): ``plan.step(t)``, the budget check (a step that
   would exceed the budget saves a checkpoint first, when a checkpoint folder is set, then raises
   :class:`~raptor.errors.BudgetExceededError`), the Poisson sample from the "sample" generator;
2. :meth:`accumulate` (``loss.backward()``): the engine's clipped sums of the sampled batch
   (:func:`raptor.integrations.batches.clipped_sums`);
3. :meth:`release` (``optimizer.step()``): :func:`raptor.training.step.release.release_gradients`
   with the step's groups and the "noise" generator, the ledger event, the step counter.

What is released and what is recorded come from the one ``Step`` of the plan that :meth:`begin`
took. Nothing about the private batch is kept after :meth:`release` but the non-finite count (a
diagnostic, not DP, as in ``Trainer``); the realized sample size and owner counts are never stored.

Privacy: every public number (the step, epsilon, the plan) is readable; the private batch's
statistics are not (see :mod:`raptor.integrations.batches`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from raptor.errors import BudgetExceededError, ConfigError
from raptor.training.config import TrainConfig
from raptor.training.step import release as _release
from raptor.training.step.plan import Step
from raptor.training.step.trainer import Trainer

_FLOAT_DTYPES = ("float32", "float64")


def count_only_records(num_records: int) -> dict[str, torch.Tensor]:
    """What the trainer is handed for private records that stay in the user's dataset: their count
    (public), as a ``labels`` column of zeros. The trainer never gathers them: the Poisson loader does."""
    return {"labels": torch.zeros(num_records, dtype=torch.long)}


def build_private_trainer(config: TrainConfig, model, *, num_records: int, public, loss_fn=None,
                          keep_trainable: bool = False) -> Trainer:
    """The trainer of an outside loop, from :func:`~raptor.training.run.assemble.assemble_run` (the batch
    size resolved, N/10 when None, the default lr and weight decay, then ``build_trainer``)."""
    from raptor.training.run.assemble import assemble_run

    if config.performance.dtype not in _FLOAT_DTYPES:
        raise ConfigError(f"performance.dtype={config.performance.dtype!r}: an outside optimizer steps the model's "
                          "own parameters, so they must be float32 or float64 (raptor.fine_tune keeps float32 master "
                          "weights of a bf16/fp16 model)")
    if config.performance.memory_budget_mib is not None:
        raise ConfigError("performance.memory_budget_mib sizes micro-batches on raptor's own records; with an outside "
                          "loader set performance.micro_batch_size instead")
    return assemble_run(config, model, train=count_only_records(num_records), validation=None, public=public,
                        loss_fn=loss_fn, keep_trainable=keep_trainable)


class PrivateRun:
    """The stages of ``Trainer.step`` for a loop that is not raptor's (see the module docstring)."""

    def __init__(self, trainer: Trainer, *, checkpoint_dir: str | Path | None = None):
        if trainer.comm.world_size != 1:
            raise ConfigError("an outside loop runs on one process; use raptor train under torchrun for data parallelism")
        self._trainer = trainer
        self._checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self._step: Step | None = None
        self._sums: dict[str, torch.Tensor] | None = None
        self._nonfinite = 0
        self._stream_of = {sl.name: rel.stream for rel in trainer.plan.groups for sl in trainer.slices_of[rel.key]}

    # ------------------------------------------------------------------ public numbers
    @property
    def plan(self):
        return self._trainer.plan

    @property
    def config(self) -> TrainConfig:
        return self._trainer.config

    @property
    def num_records(self) -> int:
        return self._trainer.num_records

    @property
    def steps_done(self) -> int:
        return self._trainer.state.step

    @property
    def steps_left(self) -> int:
        return self.plan.steps - self._trainer.state.step

    @property
    def model(self):
        return self._trainer.model

    @property
    def params(self) -> dict[str, torch.nn.Parameter]:
        """{name: parameter} of every trainable parameter in a released group."""
        return {n: self._trainer.params[n] for n in self._stream_of}

    def stream_of(self, name: str) -> str:
        return self._stream_of[name]

    def epsilon(self) -> float:
        return self._trainer.epsilon_spent()

    @property
    def delta(self) -> float | None:
        return self._trainer.delta

    @property
    def ledger(self):
        return self._trainer.ledger

    @property
    def nonfinite_records(self) -> int:
        """Records whose gradient was non-finite (zeroed): a diagnostic over private records, NOT DP."""
        return self._trainer.state.nonfinite_records

    # ------------------------------------------------------------------ the stages
    def begin(self) -> torch.Tensor | None:
        """The next planned update's Poisson sample (indices into the private records), or None
        when every planned update is done."""
        tr = self._trainer
        if tr.state.step >= tr.plan.steps:
            return None
        if self._step is not None:
            raise ConfigError("the previous Poisson batch was not released: call loss.backward() and optimizer.step() "
                              "once for every batch the loader gives")
        step = tr.plan.step(tr.state.step)
        if step.accounted and tr.epsilon_budget is not None:
            try:
                tr.ledger.check_can_record(step.sample_rate, step.ledger_sigma, 1, tr.epsilon_budget, tr.delta)
            except BudgetExceededError:
                if self._checkpoint_dir is not None:
                    self.save(self._checkpoint_dir)  # the work first, then the stop
                raise
        idx = tr.comm.sample(tr.num_records, step.sample_rate, tr.generators["sample"])
        self._step, self._sums, self._nonfinite = step, None, 0
        return idx

    def accumulate(self, batch) -> None:
        """The clipped sums of the batch :meth:`begin` sampled (once per batch)."""
        from raptor.integrations.batches import clipped_sums

        if self._step is None:
            raise ConfigError("backward() on a batch the Poisson loader did not give: iterate the loader that "
                              "make_private returned")
        if self._sums is not None:
            raise ConfigError("backward() was called twice for one Poisson batch; call optimizer.step() in between")
        tr = self._trainer
        self._sums, self._nonfinite = clipped_sums(tr.engine, batch, tr.plan.clip_norms, tr.micro_batch_size, tr.device)

    def release(self) -> tuple[dict[str, torch.Tensor], tuple[str, ...]]:
        """The step's released gradients {name: tensor} and the streams whose parameters step;
        records the ledger event and advances the step counter."""
        if self._step is None or self._sums is None:
            raise ConfigError("optimizer.step() before loss.backward(): every planned update releases the clipped "
                              "sums of its Poisson batch")
        tr, step = self._trainer, self._step
        grads = _release.release_gradients(self._sums, tr.slices_of, tr.params, step.groups, tr.generators["noise"])
        tr.state.nonfinite_records += self._nonfinite
        if step.accounted:
            tr.ledger.record(step.sample_rate, step.ledger_sigma, 1, step.phase)
        else:
            tr.state.unaccounted_steps += 1
        tr.state.step = step.t + 1
        self._step, self._sums, self._nonfinite = None, None, 0
        return grads, step.streams

    # ------------------------------------------------------------------ checkpoints
    def use_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Checkpoints hold ``optimizer`` (the user's) instead of the trainer's own stream optimizers."""
        self._trainer.optimizers = {"optimizer": optimizer}

    def save(self, path: str | Path) -> Path:
        """A checkpoint of the run (trainable weights, the user's optimizer, ledger, generators, step,
        plan): :meth:`raptor.training.step.trainer.Trainer.save`. Between updates only."""
        if self._step is not None:
            raise ConfigError("save_checkpoint between updates: after optimizer.step(), before the next batch")
        self._trainer.save(Path(path))
        return Path(path)

    def resume(self, path: str | Path) -> None:
        """Continue the checkpoint of the same run (same config, plan and public statistics):
        :meth:`raptor.training.step.trainer.Trainer.resume` with the saved ledger."""
        from raptor.accounting.ledger import PrivacyLedger

        if self._step is not None:
            raise ConfigError("load_checkpoint between updates, before the next batch")
        self._trainer.resume(Path(path), PrivacyLedger.from_dict)
