"""``build_trainer``: a loaded model, tokenized records and a config -> a ready :class:`Trainer`.

The composition root: prepare the model (device, dtype, the adapter's record-coupling policies),
route the public corpus, choose the trained layers, set the method's trainable set (or LoRA),
build the engine, compute the public stage, plan the noise, and state it all in one
:class:`~raptor.training.step_plan.StepPlan`.

Privacy: everything before the Trainer uses the public corpus only; the private training records
are only handed to the trainer (and their count N, which is public, to the noise plan).
"""

from __future__ import annotations

import torch
from torch import nn

from raptor.errors import ConfigError
from raptor.moe.adapters import get_adapter
from raptor.training.config import TrainConfig, with_batch_size
from raptor.training.distributed import Communicator, SingleProcess
from raptor.training.methods import METHOD_SPECS, MethodSpec
from raptor.training.plan import make_noise_plan
from raptor.training.public_stage import choose_trained_layers, public_routing, public_stage
from raptor.training.step_plan import build_step_plan
from raptor.training.trainable import LORA_POLICIES, apply_lora, freeze_head, head_param_names, set_trainable
from raptor.training.trainer import Records, Trainer


def make_engine(model: nn.Module, spec: MethodSpec, trained_layers, loss_fn=None, *,
                head_params=()) -> object:
    """The gradient engine of a method: per-record (roles or dense grouping) or plain autograd.

    ``head_params``: names of the head's parameters that form their own ``head`` group of the
    shared stream (``PrivacyConfig.shared_split="head"``; roles grouping only).

    ``loss_fn``: the per-record loss hook; None: the model's objective, cross-entropy or squared
    error for a one-output (regression) head (:mod:`raptor.training.objectives`).
    """
    if loss_fn is None:
        from raptor.training.objectives import loss_fn_for, task_type_of

        loss_fn = loss_fn_for(task_type_of(model))
    if spec.grouping is None:
        from raptor.training.plain import PlainEngine

        return PlainEngine(model, loss_fn)
    from raptor.per_sample.engine import PerRecordEngine

    return PerRecordEngine(model, trained_layers=trained_layers if spec.grouping == "roles" else (),
                           grouping=spec.grouping, loss_fn=loss_fn, head_params=head_params)


def split_head_params(model: nn.Module, config: TrainConfig, spec: MethodSpec) -> tuple[str, ...]:
    """The head's trainable parameters when the shared stream is split (``--shared-split head``),
    else (). The split needs the roles grouping and a shared stream with a trainable head."""
    if config.privacy.shared_split == "none":
        return ()
    if spec.grouping != "roles" or "shared" not in spec.streams:
        raise ConfigError(f"--shared-split {config.privacy.shared_split} splits the shared stream of a roles-grouped "
                          f"method (raptor, shared-only); {config.method} has none: use --shared-split none")
    names = head_param_names(model)
    if not names:
        raise ConfigError("--shared-split head: the head is not trained (--freeze-head, or a generative run); "
                          "use --shared-split none")
    return names


def build_trainer(config: TrainConfig, model: nn.Module, *, train: Records, validation: Records | None,
                  public: Records, spec: MethodSpec | None = None, evaluator=None, objective=None,
                  comm: Communicator | None = None) -> Trainer:
    """Set up ``model`` for ``config.method`` and return a ready :class:`Trainer`.

    ``public`` is the public corpus (tokenized like ``train``); ``train`` is private. A
    ``config.batch_size`` of None becomes :func:`~raptor.training.config.default_batch_size` of
    the number of ``train`` records (the trainer's ``config`` holds the resolved value). ``spec`` is a
    method-table row used instead of ``METHOD_SPECS[config.method]`` (a custom method, e.g. a
    method's trainable set with ``grouping=None, streams=()``: ordinary autograd, no clipping, no
    noise, nothing recorded). ``evaluator`` (:class:`raptor.training.evaluator.Evaluator`) scores the model
    with the task's metrics on its validation split(s); by default accuracy (Pearson/Spearman for a
    one-output head) on ``validation``. ``objective``: None (classification) or a
    :class:`raptor.training.generate.GenerativeObjective` (answer-only loss, greedy-decoding
    evaluation, LM head frozen under dp-lora, optionally frozen shared experts). ``comm`` (default:
    one process) is a torchrun job's communicator (:mod:`raptor.training.distributed`): the public
    routing and the public stage are computed on rank 0 and broadcast, the initial weights are
    rank 0's, and the dev evaluation is sharded.
    """
    comm = comm if comm is not None else SingleProcess()
    config = with_batch_size(config, int(train["labels"].shape[0]))  # None: N/10 (raptor.training.config)
    spec = spec or METHOD_SPECS[config.method]
    model.to(device=config.performance.device, dtype=getattr(torch, config.performance.dtype))
    model.eval()
    adapter = get_adapter(model)
    adapter.prepare(model)
    layers = adapter.moe_layers(model)
    owners = comm.on_main(lambda: public_routing(model, public, config))  # rank 0's, on every rank
    trained, choice = choose_trained_layers(layers, owners, config, spec)
    if spec.trainable == "lora" or (config.lora and spec.trainable in LORA_POLICIES):
        from raptor.mechanisms import GeneratorSpec

        model = apply_lora(model, config, GeneratorSpec(secure=config.privacy.secure_rng, seed=config.seed).make(2),
                           train_head=objective is None and not config.freeze_head, policy=spec.trainable,
                           trained_layers=trained)
    else:
        set_trainable(model, layers, policy=spec.trainable, trained_layers=trained,
                      freeze_shared_experts=objective is not None and objective.freeze_shared_experts)
    if config.freeze_head:
        freeze_head(model)
    comm.broadcast_module_(model)  # every replica starts from rank 0's weights (random inits included)
    engine = make_engine(model, spec, trained, None if objective is None else objective.loss_fn,
                         head_params=split_head_params(model, config, spec))
    stage = comm.on_main(lambda: public_stage(engine, layers, public, config, spec, owners=owners, choice=choice,
                                              trained_layers=trained))
    noise = make_noise_plan(config, spec.streams, dataset_size=int(train["labels"].shape[0]),
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

