"""``raptor.PrivacyEngine``: the user's own PyTorch loop, privately, on raptor's one engine.

    engine = raptor.PrivacyEngine(method="raptor", target_epsilon=4, target_delta=1e-6, epochs=3,
                                  batch_size=64, public=public_records)
    model, optimizer, loader = engine.make_private(model=model, optimizer=optimizer, data_loader=loader,
                                                   loss_fn=per_record_loss)
    for batch in loader:             # the planned number of Poisson batches (the whole run)
        loss = model(**batch)        # a PrivateLoss: nothing is computed yet, nothing can be read
        loss.backward()              # per-record gradients of loss_fn, clipped per group, summed
        optimizer.step()             # noise, public denominators, the ledger event, your optimizer's update
        optimizer.zero_grad()
    engine.epsilon()

The user's loss reaches the engine as a per-record function ``loss_fn(logits, labels) -> [B]``
(:mod:`raptor.integrations.losses`; default: the model's task loss, cross-entropy or squared error),
given once to :meth:`PrivacyEngine.make_private`. Why not ``loss_fn(model(**batch)).backward()`` on
a scalar: raptor's engine computes per-record gradients itself, in one forward and one backward of
the per-record losses, per micro-batch of its own size, with the model's experts dispatched through
its recording functions. A scalar built by the user's code outside that pass has lost the
per-record structure (and a mean over the realized batch divides by a private count); taking the
per-record function is what makes this path call exactly what ``Trainer.step`` calls, on the same
micro-batches, so one update here releases bit for bit what ``Trainer.step`` releases (tests).

Under the wrapper, :class:`raptor.integrations.run.PrivateRun` runs the stages of
``Trainer.step`` on a :class:`~raptor.training.step.trainer.Trainer` built by
:func:`~raptor.training.run.assemble.build_trainer`: the same public stage, step plan, release,
ledger, budget check and checkpoints. The user's optimizer takes the released gradient of every
trainable parameter of the streams the step updates (others keep ``grad=None``, which torch
optimizers skip).

What the user's code can read: the model, ``engine.epsilon()``, ``engine.delta``, ``engine.steps``
(planned), ``engine.steps_done``, ``engine.sigmas``, ``engine.plan_report()``. What it cannot: the
loss value of a private batch, its per-record norms, clip factors, routing or owner counts
(:class:`PrivateLoss` has no value; the engine's result is dropped after the sums are formed).

Refused: batch-coupled losses (checked on public records), a parameter whose gradient did not come
from the release (e.g. an extra ``backward()`` of the user's own), trainable parameters missing
from the optimizer, bf16/fp16 trainable parameters (use ``raptor.fine_tune``, which keeps float32
master weights), a second ``backward()`` or a missing ``optimizer.step()`` for a batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from torch import nn

from raptor.errors import ConfigError, PrivacyError
from raptor.training.config import TrainConfig, replace_fields

_UNREADABLE = ("the training loss of a private batch is a private statistic that no mechanism released; evaluate "
               "on held-out (validation) data with the model outside the loop (model.module)")


class PrivacyEngine:
    """The privacy side of an own-loop run: its config, and after :meth:`make_private` the run.

    ``method``: any method of the method table (``raptor``, ``dpsgd``, ``shared-only``, ...).
    ``target_epsilon`` / ``target_delta`` (None: 1/N^1.1, raptor's default): the budget the plan is
    calibrated to; ``noise_multipliers=(sigma_shared, sigma_expert)`` fixes sigmas instead (the
    budget then stops the run when exceeded). ``epochs`` or ``steps``: the planned updates;
    ``batch_size``: the EXPECTED Poisson batch size B (None: N/10), q = B/N. ``public``: the
    declared-public records (a dict of tensors like a collated batch, or items of the dataset's
    form, collated by the loader's ``collate_fn``); raptor's public stage (owner shares, n_hat, clip
    norms, the trained layer) reads only these. ``seed``: None for the secure generators of a real
    run; an int for a seeded, NOT secure, reproducible run. ``checkpoint_dir``: where the budget stop
    saves the run before it raises. ``config``: a :class:`~raptor.training.config.TrainConfig` with
    every other setting (clip norms, optimizer hyperparameters for the report, micro-batch size,
    device); the arguments given here replace its fields.
    """

    def __init__(self, method: str | None = None, *, target_epsilon: float | None = None,
                 target_delta: float | None = None, epochs: float | None = None, steps: int | None = None,
                 batch_size: int | None = None, noise_multipliers: tuple | None = None,
                 public=None, seed: int | None = None, micro_batch_size: int | None = None,
                 device: str | None = None, checkpoint_dir: str | Path | None = None,
                 config: TrainConfig | None = None):
        check_engine_arguments(target_epsilon=target_epsilon, target_delta=target_delta, batch_size=batch_size,
                               config=config, owner="PrivacyEngine")
        changes: dict[str, object] = {}
        for field_name, value in (("method", method), ("epochs", epochs), ("steps", steps),
                                  ("batch_size", batch_size), ("privacy.epsilon", target_epsilon),
                                  ("privacy.delta", target_delta), ("privacy.noise_multipliers", noise_multipliers),
                                  ("performance.micro_batch_size", micro_batch_size),
                                  ("performance.device", device)):
            if value is not None:
                changes[field_name] = value
        if noise_multipliers is not None and target_epsilon is None:
            changes["privacy.epsilon"] = None  # fixed sigmas: no calibration target unless one is given
        if config is None or seed is not None:
            changes["seed"] = seed
            changes["privacy.secure_rng"] = seed is None
        self.config = replace_fields(config if config is not None else TrainConfig(), changes)
        self.public = public
        self.checkpoint_dir = checkpoint_dir
        self._run = None
        self._public_batch: dict = {}

    # ------------------------------------------------------------------ setup
    def make_private(self, *, model: nn.Module, optimizer: torch.optim.Optimizer, data_loader,
                     loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                     keep_trainable: bool | None = None):
        """``(PrivateModel, PrivateOptimizer, PoissonLoader)`` for the user's loop.

        ``data_loader``: a ``torch.utils.data.DataLoader`` (its ``dataset`` and ``collate_fn`` are
        used; its batch size and shuffling are not: batches are Poisson samples of expected size B)
        or a map-style dataset. ``loss_fn(logits, labels) -> [B]``: the per-record loss (None: the
        model's task loss). ``keep_trainable``: keep the model's own ``requires_grad`` (default: True
        for a PEFT model, whose adapters its user chose; else the method's trainable set).
        """
        from raptor.integrations.loader import PoissonLoader

        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ConfigError(f"make_private: optimizer= must be a torch.optim.Optimizer over the model's parameters, "
                              f"e.g. torch.optim.AdamW(model.parameters(), lr=1e-3); got {type(optimizer).__name__}")
        dataset = getattr(data_loader, "dataset", data_loader)
        collate_fn = getattr(data_loader, "collate_fn", None)
        run = self.attach(model=model, dataset=dataset, collate_fn=collate_fn, loss_fn=loss_fn,
                          keep_trainable=keep_trainable)
        opt = PrivateOptimizer(optimizer, run)
        run.use_optimizer(optimizer)
        return PrivateModel(run.model, run), opt, PoissonLoader(run, dataset, collate_fn)

    def attach(self, *, model: nn.Module, dataset, collate_fn=None, loss_fn=None,
               keep_trainable: bool | None = None, what: str = "make_private: data_loader", batch_setting: str | None = None):
        """The run of this engine (:class:`raptor.integrations.run.PrivateRun`) over ``model`` and the
        private ``dataset``: the setup half of :meth:`make_private`, which the ``Trainer`` adapter
        (:mod:`raptor.integrations.hf_trainer`) shares; it owns the loop and the optimizer itself.
        ``what`` / ``batch_setting``: the caller's names of the dataset and of the batch size, for its
        messages."""
        from raptor.integrations.losses import check_per_record
        from raptor.integrations.run import PrivateRun, build_private_trainer

        if self._run is not None:
            raise ConfigError("make_private was already called on this PrivacyEngine; make one engine per run")
        check_model(model, "make_private: model=")
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise ConfigError("data_loader must be a DataLoader over a map-style dataset (len and indexing): Poisson "
                              "sampling draws each record independently")
        check_private_records(dataset, collate_fn, self.config.batch_size, what=what,
                              batch_setting=batch_setting or "PrivacyEngine(batch_size=...) (or config.batch_size)")
        if keep_trainable is None:
            keep_trainable = hasattr(model, "peft_config")
        if keep_trainable:
            check_user_trainable(model, self.config.method)
        public = self._public_batch = self._public_tensors(dataset, collate_fn)
        trainer = build_private_trainer(self.config, model, num_records=len(dataset), public=public,
                                        loss_fn=loss_fn, keep_trainable=keep_trainable)
        if loss_fn is not None:
            check_per_record(trainer.model, loss_fn, public, trainer.device)
        self._run = PrivateRun(trainer, checkpoint_dir=self.checkpoint_dir)
        return self._run

    def _public_tensors(self, dataset, collate_fn) -> Mapping[str, torch.Tensor]:
        public = self.public
        if public is None:
            raise ConfigError("PrivacyEngine(public=...) is required: the declared-public records raptor's public "
                              "stage reads (owner shares, denominators, clip norms); raptor never takes them from "
                              "the private dataset")
        if isinstance(public, Mapping):
            return _with_mask(dict(public))
        items = list(public)
        if not items:
            raise ConfigError("PrivacyEngine(public=...) holds no record; give the declared-public records (items "
                              "like the dataset's, or a dict of tensors)")
        collate = collate_fn
        if collate is None:
            from torch.utils.data import default_collate as collate
        batch = collate(items)
        if not isinstance(batch, Mapping):
            raise ConfigError(f"the collator returned {type(batch).__name__} for the public records; it must "
                              "return a dict of tensors")
        return _with_mask(dict(batch))

    # ------------------------------------------------------------------ public numbers
    def _need_run(self):
        if self._run is None:
            raise ConfigError("call make_private first")
        return self._run

    def epsilon(self, delta: float | None = None) -> float:
        """Epsilon spent so far at the run's delta (the ledger of the executed updates)."""
        run = self._need_run()
        if delta is not None and delta != run.delta:
            raise ConfigError(f"the run is accounted at delta={run.delta}; epsilon at another delta is not reported")
        return run.epsilon()

    get_epsilon = epsilon

    @property
    def delta(self) -> float | None:
        return self._need_run().delta

    @property
    def steps(self) -> int:
        """The planned number of updates."""
        return self._need_run().plan.steps

    @property
    def steps_done(self) -> int:
        return self._need_run().steps_done

    @property
    def sigmas(self) -> dict:
        return self._need_run().plan.sigmas

    def plan_report(self) -> dict:
        """The step plan (public): groups with their clip norms, sigmas and denominators, trained layers."""
        run = self._need_run()
        return {"plan": run.plan.noise.to_dict(), "streams": run.plan.to_dict(), "sample_rate": run.plan.sample_rate,
                "config": run.config.to_dict()}

    @property
    def nonfinite_records(self) -> int:
        """Records whose gradient was non-finite and zeroed: a diagnostic over private records, NOT DP."""
        return self._need_run().nonfinite_records

    def check(self, batch: Mapping[str, torch.Tensor] | None = None, *, records: int = 5,
              tolerance: float = 1e-4):
        """The run's own per-record engine against the one-record oracle
        (:func:`raptor.audit.engine_check.compare`, ``raptor check``'s comparison) on ``batch`` (default:
        the first ``records`` public records): a :class:`~raptor.audit.engine_check.CheckReport` whose
        ``passed`` says whether the engine's norms, clipped sums and losses match one-at-a-time autograd."""
        from raptor.audit.engine_check import compare

        run = self._need_run()
        tr = run._trainer
        if batch is None:
            batch = {k: v[:records] for k, v in self._public_batch.items() if isinstance(v, torch.Tensor)}
        batch = {k: v.to(tr.device) for k, v in batch.items()}
        grouping = getattr(tr.engine, "grouping", None)
        if grouping is None:
            raise ConfigError(f"method {run.config.method!r} has no per-record engine to check")
        return compare(tr.model, batch, trained_layers=tr.engine.trained_layers, grouping=grouping,
                       tolerance=tolerance, engine=tr.engine)

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, path: str | Path) -> Path:
        """The run's checkpoint (weights, your optimizer, ledger, generators, step, plan), between updates."""
        return self._need_run().save(path)

    def load_checkpoint(self, path: str | Path) -> None:
        """Continue a checkpoint of the same run, after :meth:`make_private` with the same model,
        config, data size and public records; the loader then gives the remaining updates."""
        self._need_run().resume(path)


class PrivateLoss:
    """The pending loss of one Poisson batch: ``backward()`` only; it has no value to read."""

    __slots__ = ("_batch", "_run")

    def __init__(self, run, batch):
        self._run, self._batch = run, batch

    def backward(self) -> None:
        """Per-record gradients of the loss, clipped per group and summed (nothing is released yet)."""
        batch, self._batch = self._batch, None
        if batch is None:
            raise ConfigError("backward() was already called on this loss")
        self._run.accumulate(batch)

    def item(self):
        raise PrivacyError(_UNREADABLE)

    def __float__(self):
        raise PrivacyError(_UNREADABLE)

    def __repr__(self) -> str:
        return "PrivateLoss(<private: no value>)"


class PrivateModel(nn.Module):
    """The user's model in the loop: ``model(**batch)`` gives a :class:`PrivateLoss` of the batch.
    ``model.module`` is the model itself (evaluation, ``save_pretrained``)."""

    def __init__(self, module: nn.Module, run):
        super().__init__()
        self.module = module
        object.__setattr__(self, "_private_run", run)

    def forward(self, **batch) -> PrivateLoss:
        return PrivateLoss(self._private_run, batch)

    def save_pretrained(self, *args, **kwargs):
        return self.module.save_pretrained(*args, **kwargs)


class PrivateOptimizer:
    """The user's optimizer, stepping on the released gradients (``optimizer.step()`` is the release)."""

    def __init__(self, optimizer: torch.optim.Optimizer, run):
        self.optimizer = optimizer
        self._run = run
        self._names = check_optimizer(optimizer.param_groups, run)

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state) -> None:
        self.optimizer.load_state_dict(state)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None) -> None:
        """Release the batch's clipped sums (noise, public denominators, the ledger event), write the
        released gradients of the stepping streams, step the optimizer."""
        if closure is not None:
            raise ConfigError("optimizer.step(closure) re-evaluates the loss; a private update releases one batch's "
                              "clipped sums once: call step() without a closure")
        refuse_foreign_gradients(self.optimizer.param_groups)
        grads, streams = self._run.release()
        write_released(self.optimizer.param_groups, self._names, self._run, grads, streams)
        self.optimizer.step()
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                p.grad = None

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.optimizer, name)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_engine_arguments(*, target_epsilon, target_delta, batch_size, config, owner: str) -> None:
    """Refuse a privacy argument of :class:`PrivacyEngine` or ``PrivacyArguments`` (``owner``) that
    no run can take, naming the argument as the caller spelled it."""
    if target_epsilon is not None and not (_number(target_epsilon) and math.isfinite(target_epsilon)
                                           and target_epsilon > 0):
        raise ConfigError(f"{owner}: target_epsilon must be a positive finite number (the budget the noise is "
                          f"calibrated to; None with noise_multipliers= to fix the noise instead), got {target_epsilon!r}")
    if target_delta is not None and not (_number(target_delta) and 0 < target_delta < 1):
        raise ConfigError(f"{owner}: target_delta must be a number in (0, 1), or None (1/N^1.1 of the N private "
                          f"records), got {target_delta!r}")
    if batch_size is not None and (not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1):
        raise ConfigError(f"{owner}: batch_size must be an integer >= 1 (the expected Poisson batch size), or None, "
                          f"got {batch_size!r}")
    if config is not None and not isinstance(config, TrainConfig):
        raise ConfigError(f"{owner}: config= must be a raptor.TrainConfig (e.g. raptor.tiny_recipe('raptor') or "
                          f"TrainConfig.from_dict(d) for a dict), or None; got {type(config).__name__}")


def check_model(model, what: str) -> None:
    """Refuse a ``model`` that is not a loaded model raptor's engine can take (``what``: the caller's
    name of the argument)."""
    from raptor.moe.adapters import supported_model_types

    if not isinstance(model, nn.Module):
        raise ConfigError(f"{what} must be a loaded torch model (an nn.Module, e.g. raptor.load_model('minilm-moe', "
                          f"num_labels=2)), got {type(model).__name__}")
    if getattr(getattr(model, "config", None), "model_type", None) is None:
        raise ConfigError(f"{what} is a {type(model).__name__} with no Hugging Face config (config.model_type), so "
                          "raptor finds no Mixture-of-Experts layer in it; give a transformers MoE model of a "
                          f"supported family ({', '.join(supported_model_types())}), or upcycle a dense one "
                          "(raptor upcycle)")


def check_private_records(dataset, collate_fn, batch_size: int | None, *, what: str, batch_setting: str) -> None:
    """Refuse an empty private dataset, a batch size that is not below its size, and records whose
    batches lack input_ids, attention_mask or labels (checked on the first record's keys only:
    nothing about the records' values is read)."""
    n = len(dataset)
    if n == 0:
        raise ConfigError(f"{what} holds no record; give the private training records")
    if batch_size is not None and batch_size >= n:
        raise ConfigError(f"{batch_setting}: the expected batch size {batch_size} must be below the {n} private "
                          f"records ({what}; q = B/N < 1); lower it, or add records")
    collate = collate_fn
    if collate is None:
        from torch.utils.data import default_collate as collate
    try:
        first = collate([dataset[0]])
    except Exception:  # a collator that needs more than one record: its batches are checked when drawn
        return
    if isinstance(first, Mapping):
        missing = [k for k in ("input_ids", "attention_mask", "labels") if k not in first]
        if missing:
            raise ConfigError(f"{what}: its records lack {', '.join(missing)} (a collated record has "
                              f"{', '.join(sorted(first))}); every record (or its collated batch) must give input_ids, "
                              "attention_mask and labels (a 'label' column becomes labels through "
                              "transformers' collators)")


def _with_mask(batch: dict) -> dict:
    """``batch`` after checking it holds what raptor's engine reads: input_ids, attention_mask, labels."""
    missing = [k for k in ("input_ids", "attention_mask", "labels") if k not in batch]
    if missing:
        raise ConfigError(f"the public records lack {', '.join(missing)} (they have {', '.join(sorted(batch))}); "
                          "records (and the collator's batches) must give input_ids, attention_mask and labels")
    return batch


def check_optimizer(param_groups, run) -> dict[int, str]:
    """``{id(parameter): name}`` of the run's trainable parameters, after refusing an optimizer that
    misses one of them or would step one in low precision."""
    held = {id(p) for group in param_groups for p in group["params"]}
    missing = [n for n, p in run.params.items() if id(p) not in held]
    if missing:
        raise ConfigError(f"the optimizer does not hold the trainable parameters {missing[:4]}"
                          f"{' ...' if len(missing) > 4 else ''}; build it over model.parameters()")
    low = [n for n, p in run.params.items() if p.dtype not in (torch.float32, torch.float64)]
    if low:
        raise ConfigError(f"trainable parameters {low[:4]} are {run.params[low[0]].dtype}: an outside optimizer "
                          "would step them in low precision; use float32 (or raptor.fine_tune, which keeps float32 "
                          "master weights)")
    return {id(p): n for n, p in run.params.items()}


def refuse_foreign_gradients(param_groups) -> None:
    """Refuse a gradient that did not come from the release: it would be applied without clipping or noise."""
    stray = [p for group in param_groups for p in group["params"] if p.grad is not None]
    if stray:
        raise PrivacyError(f"{len(stray)} parameter(s) hold a gradient that did not come from the private release "
                           "(a backward() of your own, or a missing zero_grad()); it would be applied without "
                           "clipping or noise. Call optimizer.zero_grad() and compute no other gradient")


def write_released(param_groups, names: Mapping[int, str], run, grads: Mapping[str, torch.Tensor],
                   streams: Sequence[str]) -> None:
    """``.grad`` of every optimizer parameter: its released gradient when its stream steps, else None."""
    for group in param_groups:
        for p in group["params"]:
            name = names.get(id(p))
            on = name is not None and run.stream_of(name) in streams
            p.grad = grads[name].to(p.dtype) if on else None


def check_user_trainable(model: nn.Module, method: str) -> None:
    """Refuse a trainable set of the user's own (a PEFT model) that the method cannot release
    privately: LoRA dropout (torch's global RNG), or a method with an expert stream and no trainable
    expert parameter (its noise plan accounts expert groups that nothing would release)."""
    from raptor.moe.adapters import get_adapter
    from raptor.training.methods import METHOD_SPECS

    configs = getattr(model, "peft_config", None) or {}
    drop = {k: getattr(c, "lora_dropout", 0.0) for k, c in configs.items() if getattr(c, "lora_dropout", 0.0)}
    if drop:
        raise ConfigError(f"LoraConfig(lora_dropout={next(iter(drop.values()))}) of adapter {next(iter(drop))!r}: "
                          "dropout draws from torch's global RNG, which a private run never uses (raptor keeps the "
                          "model in eval mode); build the adapter with lora_dropout=0.0")
    spec = METHOD_SPECS.get(method)
    if spec is None or "expert" not in spec.streams:
        return
    layers = get_adapter(model).moe_layers(model)
    if not any(p.requires_grad for info in layers for p in info.experts.parameters()):
        raise ConfigError(f"method {method!r} releases per-expert groups, but no expert parameter of the model is "
                          "trainable (LoraConfig target_modules holds no expert layer; fused experts take no PEFT "
                          "LoRA); add the experts' Linear layers to target_modules (bert_moe, switch_transformers: "
                          "'wi', 'wo'), or use method='shared-only' or 'dpsgd' for an attention-only adapter")


def per_record_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """An example per-record loss for a classifier: cross-entropy with ``reduction="none"``."""
    return torch.nn.functional.cross_entropy(logits.float(), labels, reduction="none")


__all__: Sequence[str] = ("PrivacyEngine", "PrivateLoss", "PrivateModel", "PrivateOptimizer", "check_optimizer",
                          "per_record_cross_entropy", "refuse_foreign_gradients", "write_released")
