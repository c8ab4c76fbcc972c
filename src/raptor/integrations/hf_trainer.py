"""A Hugging Face ``Trainer``, privately: :class:`DPTrainer` with :class:`PrivacyArguments`.

    trainer = DPTrainer(model=model, args=TrainingArguments(...), train_dataset=train, eval_dataset=dev,
                        processing_class=tokenizer,
                        privacy_args=PrivacyArguments(method="raptor", target_epsilon=4, batch_size=64,
                                                      public=public_records))
    trainer.train()                  # the planned Poisson updates; "epsilon" in every log
    trainer.save_model("out")        # from_pretrained and ``raptor predict --model out`` read it

A ``run_glue.py``-style script becomes private by changing the class and adding the privacy
arguments. Underneath is the own-loop path's one engine: :class:`DPTrainer` holds a
:class:`raptor.integrations.engine.PrivacyEngine` and its :class:`~raptor.integrations.run.PrivateRun`
(the plan, the per-record engine, the release, the ledger of
:class:`raptor.training.step.trainer.Trainer`); nothing here clips, draws noise or accounts.

What the ``Trainer`` keeps: its optimizer and learning-rate schedule (post-processing of the released
gradients), evaluation on ``eval_dataset``, callbacks, logging and saving. What changes:

* the training batches are the run's Poisson samples of expected size B
  (``PrivacyArguments.batch_size``, default ``per_device_train_batch_size``), for exactly the planned
  number of updates (``max_steps``, or ``num_train_epochs`` of N/B updates each);
* one ``training_step`` is one Poisson batch: the engine's clipped sums in micro-batches of
  ``per_device_train_batch_size`` records, then the release (noise, public denominators, the ledger
  event) written as the parameters' ``.grad`` for the ``Trainer``'s optimizer step;
* the training loss is never logged (it is a private statistic); every log carries the ledger's
  ``epsilon``; ``train()`` returns ``training_loss=nan``;
* ``TrainingArguments.max_grad_norm`` (a global clip of the already-noisy gradient) is not applied:
  records are clipped per group by the engine;
* ``save_model`` writes what ``from_pretrained`` reads (PEFT adapters merged into the base model),
  the tokenizer, ``raptor_labels.json`` (``raptor predict``) and ``raptor_privacy.json`` (epsilon,
  delta, the ledger, the plan); every checkpoint also holds the run's raptor checkpoint
  (``checkpoint-N/raptor``: ledger, generators, step, plan).

Refused, each with the ``TrainingArguments`` field to change (:func:`refuse_unprivate`): fp16/bf16
mixed precision, DeepSpeed, FSDP, ``gradient_accumulation_steps != 1``, several processes or GPUs,
``include_num_input_tokens_seen``, NEFTune, label smoothing, ``torch_compile``, a
``compute_loss_func``, ``model_init``, an IterableDataset, and resuming a ``Trainer`` checkpoint.

Privacy: user code sees the model, the logs (epsilon, the learning rate, the released gradient's
norm when logged by a callback of the user's), ``privacy_engine`` (public numbers only).
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import Trainer, TrainingArguments

from raptor.errors import ConfigError, RaptorWarning
from raptor.training.config import TrainConfig

#: keys of the Trainer's logs computed from the private training batches (dropped from every log)
PRIVATE_LOG_KEYS = ("loss", "train_loss", "total_flos")
#: raptor's file of privacy facts beside a saved model
PRIVACY_FILE = "raptor_privacy.json"


@dataclass(frozen=True)
class PrivacyArguments:
    """The privacy side of a :class:`DPTrainer` run (the ``Trainer``'s schedule, batch and device
    come from its ``TrainingArguments``).

    ``method``: any method of the method table. ``target_epsilon`` / ``target_delta`` (None: 1/N^1.1):
    the budget the noise is calibrated to; ``noise_multipliers=(sigma_shared, sigma_expert)`` fixes the
    sigmas instead. ``batch_size``: the EXPECTED Poisson batch size B (None:
    ``per_device_train_batch_size``). ``clip_shared`` / ``clip_expert``: the clip norms of the shared
    group and of each expert group (None: the config's). ``public``: the declared-public records
    (items of the training dataset's form, collated by the ``Trainer``'s collator, or a dict of
    tensors); raptor's public stage reads only these. ``seed``: None for a secure run; an int for a
    seeded, NOT secure, reproducible one. ``loss_fn``: the per-record loss ``(logits, labels) -> [B]``
    (None: the model's task loss). ``config``: a :class:`~raptor.training.config.TrainConfig` for every
    other setting (layers, the public rules); the fields above and the ``TrainingArguments`` replace its
    own.
    """

    method: str = "raptor"
    target_epsilon: float | None = 8.0
    target_delta: float | None = None
    noise_multipliers: tuple | None = None
    batch_size: int | None = None
    clip_shared: float | None = None
    clip_expert: float | None = None
    public: object = None
    seed: int | None = None
    loss_fn: Callable | None = None
    config: TrainConfig | None = None

    def __post_init__(self):
        from raptor.integrations.engine import check_engine_arguments

        check_engine_arguments(target_epsilon=self.target_epsilon, target_delta=self.target_delta,
                               batch_size=self.batch_size, config=self.config, owner="PrivacyArguments")
        if self.loss_fn is not None and not callable(self.loss_fn):
            raise ConfigError(f"PrivacyArguments: loss_fn must be a per-record loss (logits, labels) -> [B], or None; "
                              f"got {type(self.loss_fn).__name__}")


def refuse_unprivate(args: TrainingArguments, trainer: Trainer | None = None) -> None:
    """One :class:`ConfigError` naming the first ``TrainingArguments`` field (or ``Trainer`` argument)
    that a private run cannot take, and what to do instead."""
    def refuse(field: str, why: str, do: str):
        raise ConfigError(f"DPTrainer: TrainingArguments.{field} {why}; {do}")

    if args.fp16 or args.bf16:
        refuse("fp16/bf16", "turns on mixed precision: its loss scaling scales the batch's summed loss by one "
               "factor whose overflow checks read every record, and bf16 autocast changes the per-record gradients",
               "set fp16=False and bf16=False (raptor.fine_tune trains a bf16 model with float32 master weights)")
    if getattr(args, "deepspeed", None):
        refuse("deepspeed", "hands the backward, the gradients and the optimizer to DeepSpeed, which sees the "
               "unclipped batch gradient", "remove it (raptor train under torchrun gives data parallelism)")
    if getattr(args, "fsdp", None):
        refuse("fsdp", "shards parameters and reduces unclipped gradients across processes",
               "remove it (raptor train under torchrun gives data parallelism)")
    if args.gradient_accumulation_steps != 1:
        refuse("gradient_accumulation_steps", f"={args.gradient_accumulation_steps} would make one update of "
               "several sampled batches, which is not the Poisson batch the accountant assumes",
               "set it to 1 and PrivacyArguments.batch_size to the expected batch size you want; raptor splits each "
               "Poisson batch into micro-batches of per_device_train_batch_size records itself")
    if args.world_size != 1 or args.n_gpu > 1:
        refuse("world_size/n_gpu", f"gives {max(args.world_size, args.n_gpu)} processes or GPUs; the Trainer path "
               "runs on one process and one device", "run on one device (CUDA_VISIBLE_DEVICES=0), or use raptor "
               "train under torchrun for data parallelism")
    if args.include_num_input_tokens_seen not in ("no", False, None):
        refuse("include_num_input_tokens_seen", "logs the number of tokens in the sampled batches, a count of the "
               "private Poisson sample", "set it to 'no'")
    if args.neftune_noise_alpha is not None:
        refuse("neftune_noise_alpha", "adds embedding noise drawn from torch's global RNG, not from the run's "
               "generator, and is not part of the accounted mechanism", "set it to None")
    if args.label_smoothing_factor:
        refuse("label_smoothing_factor", "replaces the loss by the Trainer's batch label smoother, which the "
               "per-record engine does not run", "set it to 0 and give PrivacyArguments.loss_fn="
               "lambda logits, labels: cross_entropy(logits, labels, label_smoothing=..., reduction='none')")
    if args.torch_compile:
        refuse("torch_compile", "compiles the model, whose experts raptor dispatches through its own recording "
               "functions", "set it to False")
    if trainer is not None and trainer.compute_loss_func is not None:
        raise ConfigError("DPTrainer: compute_loss_func is a batch loss, which cannot be clipped per record; give "
                          "PrivacyArguments.loss_fn, a per-record loss (logits, labels) -> [B]")
    if trainer is not None and trainer.model_init is not None:
        raise ConfigError("DPTrainer: model_init re-creates the model at train(), after raptor planned the run on "
                          "it; pass model= (hyperparameter search is not private: each trial spends the budget)")


class DPTrainer(Trainer):
    """``transformers.Trainer`` with raptor's Poisson sampling, per-group clipping, noise and ledger
    (see the module docstring). ``privacy_args``: :class:`PrivacyArguments`; every other argument is
    the ``Trainer``'s."""

    def __init__(self, model=None, args: TrainingArguments | None = None, *positional,
                 privacy_args: PrivacyArguments | None = None, **kwargs):
        import copy

        from raptor.integrations.engine import PrivacyEngine, check_model

        if privacy_args is not None and not isinstance(privacy_args, PrivacyArguments):
            raise ConfigError(f"DPTrainer: privacy_args must be a raptor.integrations.PrivacyArguments, e.g. "
                              f"PrivacyArguments(target_epsilon=8, public=...); got {type(privacy_args).__name__}")
        if kwargs.get("model_init") is None:
            check_model(model, "DPTrainer: model=")  # before the Trainer's own message, which offers model_init
        if args is not None:
            refuse_unprivate(args)  # before the Trainer sets up devices or mixed precision
            args = copy.copy(args)  # the plan's max_steps is set on the trainer's own copy
        super().__init__(model, args, *positional, **kwargs)
        pa = privacy_args if privacy_args is not None else PrivacyArguments()
        refuse_unprivate(self.args, self)
        if self.train_dataset is None:
            raise ConfigError("DPTrainer needs train_dataset: the private records the plan is made for")
        if isinstance(self.train_dataset, torch.utils.data.IterableDataset) or not hasattr(self.train_dataset,
                                                                                             "__len__"):
            raise ConfigError("DPTrainer: train_dataset must be map-style (len and indexing): Poisson sampling draws "
                              "each record independently, which an IterableDataset cannot")
        self.privacy_args = pa
        self._collate = self._train_collator()
        dataset = self._train_items()
        config = self._train_config(pa)
        public = pa.public
        if public is None:
            raise ConfigError("DPTrainer: PrivacyArguments(public=...) is required: the declared-public records (items "
                              "like the training dataset's, or a dict of tensors) raptor's public stage reads (owner "
                              "shares, denominators, clip norms); it never takes them from train_dataset")
        if not isinstance(public, Mapping):
            public = self._items(public, "public")
            if not public:
                raise ConfigError("DPTrainer: PrivacyArguments(public=...) holds no record; give the declared-public "
                                  "records (items like the training dataset's, or a dict of tensors)")
        self.privacy_engine = PrivacyEngine(config=config, public=public,
                                            checkpoint_dir=Path(self.args.output_dir) / "budget-stop")
        batch_setting = ("PrivacyArguments.batch_size" if pa.batch_size is not None else
                         "TrainingArguments.per_device_train_batch_size (the default of PrivacyArguments.batch_size)")
        run = self.privacy_engine.attach(model=self.model, dataset=dataset, collate_fn=self._collate,
                                         loss_fn=pa.loss_fn, what="DPTrainer: train_dataset",
                                         batch_setting=batch_setting)
        self._private_run = run
        self._private_dataset = dataset
        if self.args.max_grad_norm:
            warnings.warn(f"TrainingArguments.max_grad_norm={self.args.max_grad_norm} is not applied: each record's "
                          "gradient is clipped per group before the noise (PrivacyArguments clip norms)",
                          RaptorWarning, stacklevel=2)
            self.args.max_grad_norm = 0.0  # a global clip of the noisy gradient would only shrink the update
        self.args.max_steps = run.plan.steps  # the Trainer runs exactly the planned updates
        self.model = self.model_wrapped = run.model  # a method's LoRA wraps the model
        self.callback_handler.model = run.model
        if self.optimizer is not None:
            from raptor.integrations.engine import check_optimizer

            check_optimizer(self.optimizer.param_groups, run)

    # ------------------------------------------------------------------ setup
    def _train_config(self, pa: PrivacyArguments) -> TrainConfig:
        """The run's config: ``pa.config`` with the privacy arguments and the ``Trainer``'s schedule
        (max_steps, or num_train_epochs), micro-batch size (per_device_train_batch_size) and device."""
        from raptor.training.config import replace_fields

        args = self.args
        changes: dict[str, object] = {
            "method": pa.method, "batch_size": pa.batch_size or args.per_device_train_batch_size,
            "privacy.epsilon": pa.target_epsilon, "privacy.delta": pa.target_delta,
            "performance.micro_batch_size": args.per_device_train_batch_size,
            "performance.device": str(args.device), "optim.lr": args.learning_rate, "output_dir": args.output_dir}
        if args.max_steps > 0:
            changes["steps"] = args.max_steps
        else:
            changes.update(steps=None, epochs=float(args.num_train_epochs))
        if pa.noise_multipliers is not None:
            changes["privacy.noise_multipliers"] = tuple(pa.noise_multipliers)
        for name in ("clip_shared", "clip_expert"):
            if getattr(pa, name) is not None:
                changes[f"privacy.{name}"] = getattr(pa, name)
        if pa.config is None or pa.seed is not None:
            changes["seed"] = pa.seed
            changes["privacy.secure_rng"] = pa.seed is None
        return replace_fields(pa.config if pa.config is not None else TrainConfig(), changes)

    def _train_collator(self):
        """The ``Trainer``'s collator, with the columns the model does not take removed (as the
        ``Trainer`` does), returning a plain dict."""
        try:
            import datasets
        except ImportError:  # the hub extra is not installed: no datasets.Dataset to handle
            datasets = None
        collate = self.data_collator
        if datasets is None or not isinstance(self.train_dataset, datasets.Dataset):
            collate = self._get_collator_with_removed_columns(self.data_collator, description="training")

        def to_dict(items):
            return dict(collate(items))

        return to_dict

    def _train_items(self):
        try:
            import datasets
        except ImportError:
            return self.train_dataset
        if isinstance(self.train_dataset, datasets.Dataset):
            return self._remove_unused_columns(self.train_dataset, description="training")
        return self.train_dataset

    def _items(self, records, what: str):
        try:
            import datasets
        except ImportError:
            return list(records)
        if isinstance(records, datasets.Dataset):
            return list(self._remove_unused_columns(records, description=what))
        return list(records)

    # ------------------------------------------------------------------ training
    def get_train_dataloader(self):
        """The run's Poisson loader: the remaining planned batches (no shuffling sampler)."""
        from raptor.integrations.loader import PoissonLoader

        return PoissonLoader(self._private_run, self._private_dataset, self._collate)

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """One Poisson batch per update, and no count of its labels (a private statistic)."""
        try:
            return [next(epoch_iterator)], None
        except StopIteration:
            return [], None

    def create_optimizer(self, model=None):
        optimizer = super().create_optimizer(model)
        from raptor.integrations.engine import check_optimizer

        self._private_names = check_optimizer(optimizer.param_groups, self._private_run)
        self._private_run.use_optimizer(optimizer)
        return optimizer

    def training_step(self, model, inputs, num_items_in_batch=None) -> torch.Tensor:
        """The Poisson batch's clipped sums, then its release as the parameters' ``.grad`` (the
        ``Trainer`` steps its optimizer next). Returns a zero: the batch's loss is not computed for show."""
        from raptor.integrations.engine import refuse_foreign_gradients, write_released

        run = self._private_run
        groups = self.optimizer.param_groups
        run.model.eval()  # dropout would draw from torch's global RNG
        refuse_foreign_gradients(groups)
        run.accumulate(inputs)
        grads, streams = run.release()
        write_released(groups, self._private_names, run, grads, streams)
        return torch.zeros((), device=self.args.device)

    def floating_point_ops(self, inputs) -> int:
        return 0  # the Trainer counts the sampled batch's tokens: a private count

    def train(self, resume_from_checkpoint=None, trial=None, ignore_keys_for_eval=None, **kwargs):
        """``Trainer.train`` over the planned Poisson updates; ``training_loss`` is nan (not released)."""
        if resume_from_checkpoint:
            raise ConfigError("DPTrainer: resume_from_checkpoint is not supported: the Trainer would replay the "
                              "skipped batches through the Poisson sampler; continue a checkpoint's raptor/ folder with "
                              "raptor.PrivacyEngine.load_checkpoint in an own loop, or start a new run")
        if trial is not None:
            raise ConfigError("DPTrainer: hyperparameter search trials are not private (each trial spends the budget "
                              "on the same records)")
        if self._private_run.steps_left == 0:
            raise ConfigError("DPTrainer: every planned update is done; make a new DPTrainer for a new run")
        out = super().train(ignore_keys_for_eval=ignore_keys_for_eval, **kwargs)
        return type(out)(out.global_step, math.nan, out.metrics)

    # ------------------------------------------------------------------ logging
    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """The ``Trainer``'s log without the training loss and the flos (statistics of the private
        batches), with the ledger's ``epsilon``."""
        for key in PRIVATE_LOG_KEYS:
            logs.pop(key, None)
        logs["epsilon"] = self._private_run.epsilon()
        super().log(logs, start_time)

    # ------------------------------------------------------------------ saving
    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        """``from_pretrained``-readable weights (PEFT adapters merged), the tokenizer,
        ``raptor_labels.json`` and ``raptor_privacy.json``."""
        from raptor.training.saving.final_model import plain_model, write_label_map

        output_dir = Path(output_dir if output_dir is not None else self.args.output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        final = plain_model(self.model)
        final.save_pretrained(str(output_dir))
        tokenizer = self.processing_class or getattr(self.data_collator, "tokenizer", None)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(output_dir))
        write_label_map(output_dir, label_names(final))
        (output_dir / PRIVACY_FILE).write_text(json.dumps(self.privacy_report(), indent=2, default=str) + "\n")
        torch.save(self.args, output_dir / "training_args.bin")

    def _save_checkpoint(self, model, trial) -> None:
        super()._save_checkpoint(model, trial)
        folder = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
        self._private_run.save(folder / "raptor")  # the ledger and generators with every checkpoint

    def privacy_report(self) -> dict:
        """Public facts of the run: epsilon spent, delta, steps, the ledger's events, the plan."""
        run = self._private_run
        return {"method": run.config.method, "epsilon": run.epsilon(), "delta": run.delta,
                "steps": run.steps_done, "planned_steps": run.plan.steps, "sample_rate": run.plan.sample_rate,
                "sigma": run.plan.sigmas, "ledger": run.ledger.to_dict() if run.ledger is not None else None,
                "randomness": run._trainer.randomness}


def label_names(model) -> list[str] | None:
    """A classifier's label names from its config (``id2label``); [] for a one-output regression
    head; None for a model with no classification head (a causal LM)."""
    from raptor.per_sample.task_losses import task_type_of

    config = getattr(model, "config", None)
    name = type(model).__name__
    if config is None or "CausalLM" in name or "ConditionalGeneration" in name:
        return None
    if task_type_of(model) == "regression":
        return []
    id2label = getattr(config, "id2label", None) or {}
    return [str(id2label.get(i, i)) for i in range(int(config.num_labels))]


__all__ = ("DPTrainer", "PrivacyArguments", "refuse_unprivate", "label_names")
