"""The options of :func:`raptor.fine_tune` and their checks.

:class:`RunOptions` declares the options after ``config`` once: ``fine_tune``'s keywords are its
fields, and ``raptor train`` fills one from its flags. The checks: a wrong type, an empty string or
an unknown keyword is a :class:`~raptor.errors.ConfigError` naming the argument and what to give
instead, raised before anything is read, encoded or trained (never an ``AttributeError`` from deep
inside the run). Only public facts are checked here (types, names, the model's head size and
embedding rows, the tokenizer's vocabulary size), nothing computed from the records.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from torch import nn

from raptor.errors import ConfigError


@dataclass(frozen=True)
class RunOptions:
    """How a run reads its records and runs, beside its :class:`~raptor.training.config.TrainConfig`.

    ``public_size``: a slice of ``train`` (a count, or a fraction < 1) declared public on purpose;
    ``text_columns`` / ``label_column``: the columns of classification records (default: sentence1
    sentence2, else sentence, else text; and label); ``metrics``: the dev metrics, main first
    (default: the task's); ``task_type``: auto, classification or regression; ``max_new_tokens``:
    greedy decoding length of a generative run; ``freeze_shared_experts``: keep MoE shared experts
    frozen (generative runs); ``resume``: a checkpoint of this same run to continue; ``progress``:
    a progress bar; ``checkpoint_every``: checkpoint every N steps (0: at the end only);
    ``checkpoint_start``: also before the first update; ``verbose``: print the label map before the
    first update (the library prints nothing otherwise).
    """

    public_size: float | None = None
    text_columns: Sequence[str] | str | None = None
    label_column: str = "label"
    metrics: Sequence[str] | str | None = None
    task_type: str = "auto"
    max_new_tokens: int = 16
    freeze_shared_experts: bool = False
    resume: str | None = None
    progress: bool = True
    checkpoint_every: int = 0
    checkpoint_start: bool = False
    verbose: bool = False

    @classmethod
    def from_keywords(cls, keywords: Mapping[str, object]) -> RunOptions:
        """``fine_tune(..., **keywords)``'s options; an unknown keyword is refused by name (:func:`refuse_unknown`)."""
        names = {f.name for f in fields(cls)}
        refuse_unknown({k: v for k, v in keywords.items() if k not in names})
        return cls(**keywords)


#: the keyword arguments of :func:`raptor.fine_tune` after ``config``: the records declared public,
#: then :class:`RunOptions`' fields
KEYWORDS = ("public", *(f.name for f in fields(RunOptions)))
_RECORDS = "records (a list of dicts, a datasets.Dataset or raptor.data.ClassificationData)"


@dataclass(frozen=True)
class Checked:
    """The arguments as the run uses them (a single column or metric name given as a string is a one-item tuple)."""

    text_columns: tuple[str, ...] | None
    metrics: tuple[str, ...] | None


def refuse_unknown(unknown: Mapping[str, object]) -> None:
    """``fine_tune(..., epsilon=3)``: name the keyword, the closest one, or the config field it belongs to."""
    if not unknown:
        return
    from raptor.training.config import OptimConfig, PerformanceConfig, PrivacyConfig, TrainConfig

    name = sorted(unknown)[0]
    owners = {"TrainConfig": TrainConfig, "PrivacyConfig": PrivacyConfig, "OptimConfig": OptimConfig,
              "PerformanceConfig": PerformanceConfig}
    owner = next((k for k, cls in owners.items() if name in {f.name for f in fields(cls)}), None)
    if owner is not None:
        where = "config=TrainConfig(...)" if owner == "TrainConfig" else \
            f"config=TrainConfig({owner.replace('Config', '').lower()}={owner}(...))"
        hint = f"{name} is a field of {owner}: set it in {where}"
    else:
        close = difflib.get_close_matches(name, KEYWORDS, n=1)
        hint = f"did you mean {close[0]}=?" if close else f"fine_tune takes {', '.join(KEYWORDS)}"
    raise ConfigError(f"fine_tune() got an unknown keyword argument {name}=; {hint}")


def _records_argument(name: str, value, *, required: bool) -> None:
    if value is None:
        if required:
            raise ConfigError(f"{name}= is required: give the training {_RECORDS}")
        return
    if isinstance(value, (str, bytes, os.PathLike)):
        raise ConfigError(f"{name}= got a path or string ({str(value)[:60]!r}); give {_RECORDS}. To read a "
                          "CSV/TSV/JSON Lines file, use raptor.data.load_user_files(...)")
    if isinstance(value, (int, float, bool)):
        raise ConfigError(f"{name}= must be {_RECORDS}, got {type(value).__name__}")


def check_arguments(model, tokenizer, train, validation, config, options: RunOptions, *, public) -> Checked:
    """Raise :class:`ConfigError` naming the first argument of the wrong type or value."""
    text_columns, metrics, task_type = options.text_columns, options.metrics, options.task_type
    checkpoint_every, max_new_tokens, label_column = options.checkpoint_every, options.max_new_tokens, \
        options.label_column
    from raptor.data.user_files import TASK_TYPES
    from raptor.training.config import TrainConfig

    if not isinstance(model, nn.Module):
        raise ConfigError(f"model= must be a loaded torch model (nn.Module), e.g. raptor.load_model(NAME, "
                          f"num_labels=K); got {type(model).__name__} {str(model)[:60]!r}")
    if tokenizer is None or isinstance(tokenizer, (str, bytes, os.PathLike, int, float, Mapping, list, tuple)):
        raise ConfigError(f"tokenizer= must be a loaded tokenizer (e.g. transformers.AutoTokenizer."
                          f"from_pretrained(NAME)); got {type(tokenizer).__name__} {str(tokenizer)[:60]!r}")
    if not isinstance(config, TrainConfig):
        hint = " (TrainConfig.from_dict(d) builds one from a dict)" if isinstance(config, Mapping) else ""
        raise ConfigError(f"config= must be a raptor.TrainConfig, e.g. raptor.TrainConfig(method='dpsgd') or "
                          f"raptor.tiny_recipe(...){hint}; got {type(config).__name__}")
    if str(config.output_dir).strip() == "":
        raise ConfigError("config.output_dir is empty; give a directory path (e.g. runs/my-run)")
    _records_argument("train", train, required=True)
    if isinstance(train, Mapping):
        raise ConfigError("train= is a dict; give one record per item (a list of dicts such as "
                          "{'sentence': ..., 'label': ...}), a datasets.Dataset or raptor.data.ClassificationData")
    _records_argument("validation", validation, required=False)
    _records_argument("public", public, required=False)
    if task_type not in TASK_TYPES:
        raise ConfigError(f"task_type={task_type!r} is not one of {', '.join(TASK_TYPES)}")
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) or checkpoint_every < 0:
        raise ConfigError(f"checkpoint_every must be an integer >= 0 (0: no periodic checkpoints), got "
                          f"{checkpoint_every!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    columns = _names("text_columns", text_columns)
    if columns is not None and not 1 <= len(columns) <= 2:
        raise ConfigError(f"text_columns takes one column or two (a sentence pair), got {len(columns)}: "
                          f"{list(columns)}")
    if not isinstance(label_column, str) or not label_column:
        raise ConfigError(f"label_column must be a column name (a non-empty string), got {label_column!r}")
    if columns is not None and label_column in columns:  # the label would be read as input text
        raise ConfigError(f"text_columns {list(columns)} holds the label_column {label_column!r}; the model would "
                          "read the label as its input. Give the text column(s) only")
    _same_objective(train, validation, public)
    check_max_length(model, config.max_length)
    warn_if_fine_tuned_before(model, config, options)
    return Checked(text_columns=columns, metrics=_names("metrics", metrics))


#: the attribute a model object carries once a raptor run has started on it: the runs' output directories
RUNS_ATTRIBUTE = "_raptor_fine_tune_runs"


def warn_if_fine_tuned_before(model: nn.Module, config, options: RunOptions) -> None:
    """One :class:`~raptor.errors.RaptorWarning` when ``model`` (this very object) went through an
    earlier run in this process: this run starts from that run's weights, and its epsilon covers this
    run's data alone, not the earlier run's. A ``resume`` restores its checkpoint's weights (no
    warning). Then records this run on the object."""
    runs = list(getattr(model, RUNS_ATTRIBUTE, ()))
    if runs and options.resume is None:
        import warnings

        from raptor.errors import RaptorWarning

        warnings.warn(f"model=: this model object was already fine-tuned in this process (output_dir {runs[-1]}); "
                      "this run starts from that run's weights, and its epsilon does not cover the earlier run's "
                      "data (the two runs' privacy losses add up). For an independent run, load the model again "
                      "(raptor.load_model) or pass a copy made before the first run", RaptorWarning, stacklevel=4)
    runs.append(str(config.output_dir))
    object.__setattr__(model, RUNS_ATTRIBUTE, tuple(runs))


def _names(arg: str, value) -> tuple[str, ...] | None:
    """A string is one name (not its characters); otherwise a sequence of strings."""
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{arg} must be a name or a list of names (strings), got {value!r}")
    return tuple(value)


def check_model_fits(model: nn.Module, tokenizer, num_labels: int, kind: str) -> None:
    """The model's classification head has an output per label, and its embedding a row for every
    token id the tokenizer can produce (public facts: the head, the embedding, the vocabulary)."""
    outputs = getattr(getattr(model, "config", None), "num_labels", None)
    if kind == "classification" and isinstance(outputs, int) and outputs < num_labels:
        raise ConfigError(f"model=: its head has {outputs} outputs (config.num_labels) but the training labels have "
                          f"{num_labels} classes; build it with num_labels={num_labels}")
    try:
        vocab = len(tokenizer)
        rows = model.get_input_embeddings().num_embeddings
    except (TypeError, AttributeError, NotImplementedError):
        return
    if vocab > rows:
        raise ConfigError(f"tokenizer=: its {vocab} tokens do not fit the model's {rows} embedding rows; give the "
                          f"tokenizer the model was trained with (or build the model with vocab_size >= {vocab})")


#: the longest ``max_length`` of a model whose config names no position bound (as ``raptor train``'s
#: tiny families): its position table is allocated at that size
MAX_UNBOUNDED_LENGTH = 4096
#: model config keys that bound the positions a model takes
POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length")


def check_max_length(model: nn.Module, max_length: int) -> None:
    """``config.max_length`` within the model's positions (its config's bound, else
    :data:`MAX_UNBOUNDED_LENGTH`), checked before anything is allocated."""
    config = getattr(model, "config", None)
    positions = next((v for k in POSITION_KEYS if isinstance(v := getattr(config, k, None), int) and v > 0), None)
    if positions is not None and max_length > positions:
        raise ConfigError(f"config.max_length {max_length} is above the model's {positions} positions "
                          "(model.config.max_position_embeddings); lower max_length, or build the model with more "
                          "positions")
    if positions is None and max_length > MAX_UNBOUNDED_LENGTH:
        raise ConfigError(f"config.max_length {max_length} is above {MAX_UNBOUNDED_LENGTH}, the most raptor takes for a "
                          "model whose config names no position bound; lower max_length")


def _same_objective(train, validation, public) -> None:
    """Generation records (QAData, VQAData) and classification records are not mixed across
    ``train=``, ``validation=`` and ``public=`` (a clear error here, not an AttributeError deep in the run)."""
    from raptor.data.qa import QAData
    from raptor.data.vqa import VQAData

    def kind(value):
        return type(value).__name__ if isinstance(value, (QAData, VQAData)) else "classification records"

    want = kind(train)
    if want != "classification records" and isinstance(validation, Mapping):
        raise ConfigError(f"validation= is a dict, but generation takes one validation split: give one {want}")
    for name, value in (("validation", validation), ("public", public)):
        for v in (() if value is None else value.values() if isinstance(value, Mapping) else (value,)):
            if kind(v) != want:
                raise ConfigError(f"{name}= holds {kind(v)} but train= holds {want}; give every split the same kind "
                                  "(generation: raptor.data.qa.QAData or raptor.data.vqa.VQAData for each; "
                                  "classification: records with a text column and a label)")
