"""``raptor.fine_tune``: DP fine-tuning of a model the caller already loaded.

    result = raptor.fine_tune(model, tokenizer, train, validation, config, public=public)

``train`` / ``validation`` / ``public``: lists of dicts (``{"sentence": ..., "label": ...}``), a
``datasets.Dataset`` or :class:`raptor.data.ClassificationData`. Public data is only what the
caller declared (the rule of ``raptor train``, :mod:`raptor.data.public_source`): ``public=``
records, or ``public_size=`` (a slice of ``train``, removed from the private records, given on
purpose). With neither, ``train`` is never sliced: a non-private run uses its own training data
for the routing statistics, a DP run whose method computes nothing from public data (see
:func:`raptor.training.setup.public_stage.public_needs`) runs without, and any other DP run is a
:class:`~raptor.errors.ConfigError` naming what needs public data. ``raptor train`` calls this
same function (with ``public_source=`` the source it resolved). ``results["data"]["public_source"]``
records the source.

``validation`` may also be ``{name: rows}`` for several validation splits (MNLI: ``matched``,
``mismatched``); ``metrics`` names the task's metrics, main first (default: accuracy, or Pearson
and Spearman for float labels; see :mod:`raptor.evaluation.metrics`). Float labels (inferred,
or ``task_type="regression"``) train a one-output head with squared-error loss; the model must
have been built with ``num_labels=1``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from torch import nn

from raptor.data import ClassificationData
from raptor.data.labels import label_map_line
from raptor.data.public_source import PublicSource
from raptor.errors import BudgetExceededError, ConfigError
from raptor.training.config import TrainConfig, resolve_optim
from raptor.training.run.assemble import assemble_run
from raptor.training.run.jobs import classification_job, generative_job, is_generative
from raptor.training.run.options import RunOptions, check_arguments
from raptor.training.step.trainer import Trainer

Rows = Iterable[Mapping] | ClassificationData


@dataclass(frozen=True)
class FineTuneResult:
    """The trained model, the trainer (ledger, plan, checkpoints) and results.json's content."""

    model: nn.Module
    trainer: Trainer
    results: dict
    tokenizer: object = None  # the run's tokenizer (on resume: the checkpoint's)


def fine_tune(model: nn.Module | str | None, tokenizer, train: Rows, validation: Rows | None = None,
              config: TrainConfig | None = None, *, public: Rows | None = None, **options) -> FineTuneResult:
    """Fine-tune ``model`` (a loaded HF MoE model of a supported family) with ``config.method``.

    ``model=None`` (with ``tokenizer=None``: a model by name brings its own) loads the default model, ``minilm-moe`` (the upcycled
    all-MiniLM-L6-v2, built on first use), its head sized to the labels, and ``config=None`` is then
    its recipe (:func:`raptor.recipes.default_recipe`: LoRA r 8, lr 5e-3, the public layer rule); a
    shipped or saved model's name or directory loads that model the same way.

    Example (a tiny random OLMoE classifier; ``raptor.fine_tune`` is this function)::

        >>> import torch, raptor
        >>> from raptor.moe.models import TinySize, build_model
        >>> from raptor.data import train_wordpiece
        >>> rows = [{"sentence": f"{w} film", "label": int(w == "good")} for w in ["good", "bad"] * 20]
        >>> tok = train_wordpiece(["good film", "bad film"], vocab_size=40)
        >>> model = build_model("olmoe", generator=torch.Generator().manual_seed(0),
        ...                     size=TinySize(vocab_size=len(tok), hidden_size=16))
        >>> config = raptor.tiny_recipe("dpsgd", steps=1, output_dir="run-doc")  # seeded: NOT secure
        >>> out = raptor.fine_tune(model, tok, rows[:30], rows[30:], config, public=rows[30:], progress=False)
        >>> out.results["steps"], out.results["epsilon"] <= 8
        (1, True)

    The objective follows the records: rows of text and labels (lists of dicts, a
    ``datasets.Dataset`` or :class:`raptor.data.ClassificationData`) fine-tune a classifier;
    :class:`raptor.data.qa.QAData` (prompt, answer) or :class:`raptor.data.vqa.VQAData` (image,
    question, answer) records fine-tune a causal LM or DeepSeek-VL2 on the answer tokens only,
    scored by greedy decoding (``max_new_tokens``) with exact match and token F1, before training
    (``results["zero_shot"]``) and at every evaluation point; ``freeze_shared_experts`` keeps the
    MoE shared experts frozen (the reference's DeepSeek-VL2 setting).

    ``options``: the fields of :class:`~raptor.training.run.options.RunOptions` (``public_size``,
    ``text_columns``, ``label_column``, ``metrics``, ``task_type``, ``max_new_tokens``,
    ``freeze_shared_experts``, ``resume``, ``progress``, ``checkpoint_every``, ``checkpoint_start``,
    ``verbose``: print the label map before the first update; nothing is printed otherwise).
    ``config`` defaults to ``TrainConfig()`` (RAPTOR, epsilon 8, secure randomness). Checkpoints
    (``config.output_path / "checkpoint"``, every ``checkpoint_every`` steps and, with
    ``checkpoint_start``, before the first update) hold everything needed to continue the same
    run: the weights, the tokenizer, the plan and public statistics, the ledger, the optimizers
    and the generator states, and a fingerprint of the config and data. ``resume`` continues such a
    checkpoint: a changed config or data set is a :class:`ConfigError` listing what changed, and the
    run's initial weights and tokenizer are taken from the checkpoint (nothing is redrawn). A step
    that would exceed the budget saves a checkpoint (when checkpointing is on) and raises
    :class:`~raptor.errors.BudgetExceededError` whose ``partial`` attribute is the
    :class:`FineTuneResult` so far. ``config.batch_size`` must be below the number of private
    records (:func:`raptor.training.config.check_batch_size`). Returns a :class:`FineTuneResult`.
    An argument of the wrong type or an unknown keyword is a :class:`ConfigError` naming it
    (:mod:`raptor.training.run.options`).
    """
    opts = RunOptions.from_keywords(options)
    name = None
    if model is None or isinstance(model, str):
        model, tokenizer, name = load_named_model(model, tokenizer, train, config, opts)
        if config is None:
            from raptor.training.config import default_train_config

            config = default_train_config(model=name)
    return run_fine_tune(model, tokenizer, train, validation, config, opts, public=public, model_name=name)


def load_named_model(name: str | None, tokenizer, train, config: TrainConfig | None, options: RunOptions):
    """(model, tokenizer, directory) of ``fine_tune``'s model given by name (``None``: the default
    model, :data:`raptor.data.model_source.DEFAULT_MODEL`, built on first use), its head sized to
    ``train``'s labels (:func:`raptor.moe.models.load_model`) and drawn from the run's initialisation
    generator (seeded by ``config.seed``, else secure). A tiny family needs its model built by the
    caller (:func:`raptor.moe.models.build_model`): it has no weights to load."""
    from raptor.data import load_tokenizer
    from raptor.data.loaders import from_records
    from raptor.data.model_source import DEFAULT_MODEL, init_generator
    from raptor.moe.models import load_model
    from raptor.moe.names import FAMILY_NAMES
    from raptor.shipped import resolve

    name = DEFAULT_MODEL if name is None else name
    if name in FAMILY_NAMES:
        raise ConfigError(f"fine_tune: {name!r} is a tiny family with no weights; build it with "
                          f"raptor.moe.models.build_model({name!r}, ...) and pass the model and its tokenizer")
    if tokenizer is not None:
        raise ConfigError(f"fine_tune: model={name!r} is loaded by name with its own tokenizer; pass tokenizer=None "
                          "(or load both yourself: raptor.load_model and raptor.data.load_tokenizer)")
    if is_generative(train):
        raise ConfigError("fine_tune: a model by name is loaded as a classifier; for QAData/VQAData records pass "
                          "the loaded causal LM and its tokenizer")
    labels = from_records(train, text_columns=options.text_columns, label_column=options.label_column,
                          source="train", task_type=options.task_type)
    path = str(resolve(name))
    seed = config.seed if config is not None else None
    model = load_model(path, num_labels=labels.num_labels, generator=init_generator(seed))
    return model, load_tokenizer(path), path


@dataclass
class PreparedRun:
    """A run assembled and ready for its first update (:func:`prepare_run`): the trainer (its
    config's batch size resolved, its plan and ledger made), the run's tokenizer, the label map,
    and results entries of the data; :meth:`fit` trains it."""

    trainer: Trainer
    tokenizer: object
    options: RunOptions
    label_names: tuple = ()
    label_words: Sequence[str] | None = None
    extra: dict = field(default_factory=dict)

    @property
    def label_map(self) -> str | None:
        """The one-line label map of a classification run (None for a generative one)."""
        return label_map_line(self.label_names, self.label_words) if self.label_names else None

    def fit(self) -> FineTuneResult:
        """Train to the planned number of updates; a budget stop raises
        :class:`~raptor.errors.BudgetExceededError` with ``partial`` the result so far."""
        trainer, options = self.trainer, self.options
        try:
            results = trainer.fit(progress=options.progress, checkpoint_every=options.checkpoint_every,
                                  checkpoint_start=options.checkpoint_start)
        except BudgetExceededError as err:
            err.results.update(self.extra, stopped_by_budget=str(err))
            err.partial = FineTuneResult(model=trainer.model, trainer=trainer, results=err.results,
                                         tokenizer=self.tokenizer)
            raise
        results.update(self.extra)
        return FineTuneResult(model=trainer.model, trainer=trainer, results=results, tokenizer=self.tokenizer)


def run_fine_tune(model: nn.Module, tokenizer, train, validation=None, config: TrainConfig | None = None,
                  options: RunOptions | None = None, **kwargs) -> FineTuneResult:
    """:func:`prepare_run`, the label map when ``options.verbose``, then :meth:`PreparedRun.fit`."""
    prepared = prepare_run(model, tokenizer, train, validation, config, options, **kwargs)
    if prepared.options.verbose and prepared.label_map:
        print(prepared.label_map, flush=True)
    return prepared.fit()


def prepare_run(model: nn.Module, tokenizer, train, validation=None, config: TrainConfig | None = None,
                options: RunOptions | None = None, *, public=None, public_source: PublicSource | None = None,
                model_name: str | None = None, base: dict | None = None, comm=None,
                label_words: Sequence[str] | None = None) -> PreparedRun:
    """:func:`fine_tune`'s run up to its first update, with the plumbing of ``raptor train`` (both
    objectives), the demo and the experiments: the records checked and encoded, the resume checked
    against its checkpoint (:func:`raptor.training.run.start.start_run`: the one place), the batch
    size resolved (:func:`raptor.training.run.assemble.assemble_run`: once), the plan and the
    public stage computed. Nothing is printed.

    ``public_source``: the source ``public`` came from when the caller already separated it from
    ``train`` (``public`` is then used as is, possibly empty for kind ``none``). ``model_name``: the
    ``save_pretrained`` directory the model was loaded from; the checkpoint then stores only the
    weights not read unchanged from it (``base``: their ``{name: shape}``, by default
    :func:`raptor.data.model_source.base_weights` of ``model_name``). ``comm``: a torchrun job's
    communicator (:func:`raptor.training.run.distributed.init_communicator`; default one process).
    ``label_words``: the words the head was initialised from, one per label id (in the label map
    and saved in results ``labels``).
    """
    from raptor.data.model_source import base_weights
    from raptor.training.run.start import start_run
    from raptor.training.saving.fingerprint import fingerprint
    from raptor.training.setup.routing_cache import routing_cache_dir

    config = config if config is not None else TrainConfig()
    options = options if options is not None else RunOptions()
    checked = check_arguments(model, tokenizer, train, validation, config, options, public=public)
    config = resolve_optim(config)  # weight decay left to None: the optimizer's default
    if public_source is None and public is not None and options.public_size is not None:
        raise ConfigError("give either public= records or public_size=, not both")
    if public_source is not None and public is None:
        raise ConfigError(f"public_source={public_source.kind} needs the public records it designated (public=)")
    if is_generative(train):
        job = generative_job(train, validation, config, options, public=public, source=public_source)
    else:
        if options.freeze_shared_experts:
            raise ConfigError("freeze_shared_experts applies to generative fine-tuning (QAData or VQAData records)")
        job = classification_job(model, train, validation, config, options, public=public, source=public_source,
                                 text_columns=checked.text_columns, metrics=checked.metrics, label_words=label_words)
    # the config as given (batch_size None: N/10 of the private records, which the fingerprint holds)
    fp = fingerprint(dict(config.to_dict(), **job.fingerprint_config), model=model_name or type(model).__name__,
                     train=job.private, public=job.public, validation=job.validation,
                     label_names=job.label_names, public_source=job.source.to_dict())
    # same run? then its own initial weights and tokenizer: nothing is redrawn or retrained
    start = start_run(model, tokenizer, fingerprint=fp, resume=options.resume,
                      base=base if base is not None else base_weights(model_name))
    model, tokenizer = start.model, start.tokenizer
    enc = job.encode(model, tokenizer, config)
    trainer = assemble_run(config, model, train=enc.train, validation=enc.validation, public=enc.public,
                           evaluator=enc.evaluator, objective=enc.objective, comm=comm, start=start,
                           routing_cache=routing_cache_dir(model_name))
    return PreparedRun(trainer, tokenizer, options, label_names=tuple(job.label_names or ()), label_words=label_words,
                       extra=dict(job.results, **enc.results))
