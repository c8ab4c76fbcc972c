"""The assembly of a run: a loaded model, tokenized records and a config -> a ready :class:`Trainer`.

:func:`assemble_run` is the one assembly every run goes through (``fine_tune``, ``raptor train``
of both objectives, the demo, the audits and the experiments): it resolves the batch size
(:func:`raptor.training.config.resolve_batch_size`), builds the trainer and, for a resumed run,
continues the checkpoint. :func:`build_trainer` is the composition root it calls: prepare the model (device, dtype, the adapter's record-coupling policies),
route the public corpus, choose the trained layers, set the method's trainable set (or LoRA),
build the engine, compute the public stage, plan the noise, and state it all in one
:class:`~raptor.training.step.plan.StepPlan`.

Privacy: everything before the Trainer uses the public corpus only; the private training records
are only handed to the trainer (and their count N, which is public, to the noise plan).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from raptor.errors import ConfigError
from raptor.moe.adapters import get_adapter
from raptor.training.config import TrainConfig, resolve_batch_size
from raptor.training.methods import METHOD_SPECS, MethodSpec
from raptor.training.run.distributed import Communicator, SingleProcess
from raptor.training.setup.public_stage import choose_trained_layers, public_routing, public_stage
from raptor.training.setup.routing_cache import cached_public_routing
from raptor.training.setup.trainable import (
    apply_lora,
    freeze_head,
    freeze_routers_and_untrained_experts,
    head_param_names,
    set_trainable,
)
from raptor.training.step.noise_plans import make_noise_plan
from raptor.training.step.plan import build_step_plan
from raptor.training.step.trainer import Records, Trainer


def make_engine(model: nn.Module, spec: MethodSpec, trained_layers, loss_fn=None, *,
                head_params=()) -> object:
    """The gradient engine of a method: per-record (roles or dense grouping) or plain autograd.

    ``head_params``: names of the head's parameters that form their own ``head`` group of the
    shared stream (``PrivacyConfig.shared_split="head"``; roles grouping only).

    ``loss_fn``: the per-record loss hook; None: the model's objective, cross-entropy or squared
    error for a one-output (regression) head (:mod:`raptor.per_sample.task_losses`).
    """
    if loss_fn is None:
        from raptor.per_sample.task_losses import loss_fn_for, task_type_of

        loss_fn = loss_fn_for(task_type_of(model))
    if spec.grouping is None:
        from raptor.training.step.plain import PlainEngine

        return PlainEngine(model, loss_fn)
    from raptor.per_sample.engine import PerRecordEngine

    return PerRecordEngine(model, trained_layers=trained_layers if spec.grouping == "roles" else (),
                           grouping=spec.grouping, loss_fn=loss_fn, head_params=head_params)


def split_head_params(model: nn.Module, config: TrainConfig, spec: MethodSpec) -> tuple[str, ...]:
    """The head's trainable parameters when the shared stream is split (``privacy.shared_split="head"``),
    else (). The split needs the roles grouping and a shared stream with a trainable head."""
    if config.privacy.shared_split == "none":
        return ()
    if spec.grouping != "roles" or "shared" not in spec.streams:
        raise ConfigError(f"privacy.shared_split={config.privacy.shared_split} splits the shared stream of a roles-grouped "
                          f"method (raptor, shared-only); {config.method} has none: use privacy.shared_split=none")
    names = head_param_names(model)
    if not names:
        raise ConfigError("privacy.shared_split=head: the head is not trained (freeze_head=true, or a generative run); "
                          "use privacy.shared_split=none")
    return names


def build_trainer(config: TrainConfig, model: nn.Module, *, train: Records, validation: Records | None,
                  public: Records, spec: MethodSpec | None = None, evaluator=None, objective=None,
                  comm: Communicator | None = None, loss_fn=None, keep_trainable: bool = False,
                  routing_cache: Path | None = None) -> Trainer:
    """Set up ``model`` for ``config.method`` and return a ready :class:`Trainer`.

    ``public`` is the public corpus (tokenized like ``train``); ``train`` is private.
    ``config.batch_size`` must be resolved (:func:`assemble_run` does it). ``spec`` is a
    method-table row used instead of ``METHOD_SPECS[config.method]`` (a custom method, e.g. a
    method's trainable set with ``grouping=None, streams=()``: ordinary autograd, no clipping, no
    noise, nothing recorded). ``evaluator`` (:class:`raptor.training.evaluator.Evaluator`) scores the model
    with the task's metrics on its validation split(s); by default accuracy (Pearson/Spearman for a
    one-output head) on ``validation``. ``objective``: None (classification) or a
    :class:`raptor.training.generate.GenerativeObjective` (answer-only loss, greedy-decoding
    evaluation, LM head frozen under dp-lora, optionally frozen shared experts). ``comm`` (default:
    one process) is a torchrun job's communicator (:mod:`raptor.training.run.distributed`): the public
    routing and the public stage are computed on rank 0 and broadcast, the initial weights are
    rank 0's, and the dev evaluation is sharded. ``loss_fn``: a per-record loss ``(logits, labels) ->
    [B]`` for the engine instead of the task's or the objective's (:mod:`raptor.integrations`).
    ``keep_trainable``: the model's own ``requires_grad`` (e.g. a PEFT model the user built) instead
    of the method's trainable set; routers and the experts of untrained layers are still frozen.
    ``routing_cache``: a directory caching the public routing by content
    (:mod:`raptor.training.setup.routing_cache`; None: computed every time).
    """
    comm = comm if comm is not None else SingleProcess()
    if config.batch_size is None:
        raise ConfigError("build_trainer needs a resolved config.batch_size; assemble_run (or "
                          "raptor.training.config.resolve_batch_size) resolves the default N/10")
    spec = spec or METHOD_SPECS[config.method]
    model.to(device=config.performance.device, dtype=getattr(torch, config.performance.dtype))
    model.eval()
    adapter = get_adapter(model)
    adapter.prepare(model)
    layers = adapter.moe_layers(model)
    owners = comm.on_main(lambda: cached_public_routing(  # rank 0's, on every rank
        model, public, config, lambda: public_routing(model, public, config), routing_cache))
    trained, choice = choose_trained_layers(layers, owners, config, spec)
    if config.lora and spec.lora_rule == "never":
        raise ConfigError(f"TrainConfig.lora=True does not apply to {config.method}: its trainable set "
                          f"{spec.trainable!r} is full weights by definition")
    if keep_trainable:
        freeze_routers_and_untrained_experts(model, layers, trained)
    elif spec.uses_lora(config.lora):
        from raptor.mechanisms import GeneratorSpec

        model = apply_lora(model, config, GeneratorSpec(secure=config.privacy.secure_rng, seed=config.seed).make(2),
                           train_head=objective is None and not config.freeze_head, trainable=spec.trainable,
                           trained_layers=trained)
    else:
        set_trainable(model, layers, trainable=spec.trainable, trained_layers=trained,
                      freeze_shared_experts=objective is not None and objective.freeze_shared_experts)
    if config.freeze_head:
        freeze_head(model)
    comm.broadcast_module_(model)  # every replica starts from rank 0's weights (random inits included)
    engine = make_engine(model, spec, trained, loss_fn if loss_fn is not None else
                         None if objective is None else objective.loss_fn,
                         head_params=split_head_params(model, config, spec))
    stage = comm.on_main(lambda: public_stage(engine, layers, public, config, spec, owners=owners, choice=choice,
                                              trained_layers=trained))
    noise = make_noise_plan(config, spec, dataset_size=int(train["labels"].shape[0]),
                            num_layers=len(trained))
    plan = build_step_plan(noise, engine.group_map.groups, clip_norms=stage.clip_norms,
                           denominators=stage.denominators, trained_layers=trained,
                           grouping=spec.grouping or "plain", epsilon_budget=config.privacy.epsilon,
                           public_report=stage.report)
    if evaluator is not None and comm.world_size > 1:
        evaluator = evaluator.sharded(comm)
    cls, extra = (Trainer, {"evaluator": evaluator}) if objective is None else \
        (objective.trainer_class(), {"objective": objective})
    return cls(model=model, engine=engine, plan=plan, train=train, validation=validation, config=config,
               extra_results={"trained_layers": list(trained), "method_spec": spec.to_dict(),
                              "world_size": comm.world_size}, comm=comm, **extra)


def assemble_run(config: TrainConfig, model: nn.Module, *, train: Records, validation: Records | None,
                 public: Records, spec: MethodSpec | None = None, evaluator=None, objective=None,
                 comm: Communicator | None = None, start=None, loss_fn=None, keep_trainable: bool = False,
                 routing_cache: Path | None = None) -> Trainer:
    """The one assembly of a run: ``config``'s batch size resolved against the ``train`` records (a
    public count; None: N/10, :func:`~raptor.training.config.resolve_batch_size`), the trainer built
    (:func:`build_trainer`, whose arguments these are) and, given a
    :class:`~raptor.training.run.start.RunStart` (``start``), the run started or continued from its
    checkpoint (:func:`~raptor.training.run.start.continue_run`)."""
    config = resolve_batch_size(config, int(train["labels"].shape[0]))
    trainer = build_trainer(config, model, train=train, validation=validation, public=public, spec=spec,
                            evaluator=evaluator, objective=objective, comm=comm, loss_fn=loss_fn,
                            keep_trainable=keep_trainable, routing_cache=routing_cache)
    if start is not None:
        from raptor.training.run.start import continue_run

        continue_run(trainer, start)
    return trainer
