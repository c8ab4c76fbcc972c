"""Small Hugging Face MoE models with a sequence-classification head, for every supported family.

Two jobs live here:

* :func:`tiny_config` / :func:`build_model` make small random-weight models from configs, so that
  tests, benchmarks and the demo run on a CPU without a model hub.
* :func:`load_model` loads a model from a local directory written by ``save_pretrained`` (the
  same code path a user takes with ``google/switch-base-8`` or ``allenai/OLMoE-1B-7B-0924``), or
  from a hub name where the hub is reachable.

Everything family-specific (the classification class, the tiny-config fields) is declared in the
family's adapter entry (:mod:`raptor.moe.adapters`); the heads raptor adds live in
:mod:`raptor.moe.heads`.

Random draws: weights are (re)initialised from an explicit ``torch.Generator``; the global RNG is
neither read nor seeded.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
from pathlib import Path

import torch
import transformers
from torch import nn
from transformers import CONFIG_MAPPING, PretrainedConfig

from raptor._quiet_log import ScopedDrop
from raptor.errors import ConfigError, UnsupportedModelError
from raptor.moe import bert_moe as _bert_moe  # noqa: F401 - registers the bert_moe family's Auto classes
from raptor.moe.adapters import TinySize, get_adapter, supported_model_types
from raptor.moe.heads import OlmoeForSequenceClassification, SwitchForSequenceClassification

__all__ = ["FAMILIES", "OlmoeForSequenceClassification", "SwitchForSequenceClassification", "TinySize",
           "build_model", "classification_class", "init_missing_", "init_weights_", "load_model", "tiny_config"]

#: the supported families, in registry order (one adapter entry each)
FAMILIES: tuple[str, ...] = tuple(t for t in supported_model_types() if get_adapter(t).head_class is not None)


def _unknown_family(name: str) -> UnsupportedModelError:
    return UnsupportedModelError(
        f"unknown model family {name!r}; supported families are: {', '.join(FAMILIES)}"
    )


def classification_class(model_type: str):
    """The sequence-classification class raptor uses for ``model_type`` (from its adapter entry)."""
    if model_type not in FAMILIES:
        raise _unknown_family(model_type)
    return get_adapter(model_type).classification_class()


def tiny_config(family: str, *, num_labels: int = 2, size: TinySize | None = None, **overrides) -> PretrainedConfig:
    """A small config of ``family`` with a ``num_labels``-way classification head.

    ``overrides`` are set on the config last (for example ``num_layers=4`` for Switch).
    """
    if family not in FAMILIES:
        raise _unknown_family(family)
    if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
        raise ConfigError(f"num_labels must be >= 1 (1: a regression head), got {num_labels}")
    kwargs = get_adapter(family).tiny_config_kwargs(size or TinySize())
    kwargs.update(overrides)
    config = CONFIG_MAPPING[family](**kwargs)
    config.num_labels = num_labels
    if num_labels == 1:
        config.problem_type = "regression"
    return config


@torch.no_grad()
def init_weights_(model: nn.Module, generator: torch.Generator, std: float = 0.02) -> nn.Module:
    """Re-initialise every floating parameter from ``generator`` (normal(0, std) for matrices,
    ones for norm weights, zeros for biases). Buffers are left as built.

    Privacy: uses only the explicit generator; the global RNG is not touched.
    """
    for name, param in model.named_parameters():
        if param.is_floating_point():
            _init_parameter_(name, param, generator, std)
    return model


def _init_parameter_(name: str, param: torch.Tensor, generator: torch.Generator, std: float) -> None:
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "bias" or name.endswith("_bias"):  # bert_moe's expert biases are 2-D [d_out, 1]
        param.zero_()
    elif param.ndim >= 2:
        param.copy_(torch.randn(param.shape, generator=generator, dtype=torch.float32).mul_(std).to(param.dtype))
    else:  # 1-D weights: norm scales
        param.fill_(1.0)


def build_model(
    family_or_config: str | PretrainedConfig,
    *,
    num_labels: int = 2,
    generator: torch.Generator | None = None,
    size: TinySize | None = None,
    **overrides,
) -> nn.Module:
    """A random-weight classification model of a family (tiny by default) or of a given config.

    Weights come from ``generator`` (a fresh ``torch.Generator`` seeded with 0 when omitted, so
    that tests are reproducible; pass a seeded or secure one in real runs).
    """
    if isinstance(family_or_config, str):
        config = tiny_config(family_or_config, num_labels=num_labels, size=size, **overrides)
    else:
        config = family_or_config
    cls = classification_class(config.model_type)
    # Module constructors draw their default init from the global RNG; those draws are overwritten
    # below, and fork_rng restores the global state so that building a model has no side effect on it.
    with torch.random.fork_rng(devices=[]):
        model = cls(config)
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    init_weights_(model, generator)
    model.eval()
    return model


def _missing_parameter_names(info: dict) -> set[str]:
    """Parameter names ``from_pretrained`` had to create: missing, or resized (mismatched) keys."""
    names = set(info.get("missing_keys") or ())
    for entry in info.get("mismatched_keys") or ():
        names.add(entry[0] if isinstance(entry, (tuple, list)) else entry)
    return names


@torch.no_grad()
def init_missing_(model: nn.Module, names: set[str], generator: torch.Generator, std: float = 0.02) -> tuple[str, ...]:
    """Re-initialise the parameters in ``names`` (those a checkpoint lacked, e.g. a new
    classification head) by the rule of :func:`init_weights_`, from ``generator`` only; returns
    the names re-initialised, sorted. Every other parameter keeps its loaded value."""
    done = []
    for name, param in model.named_parameters():
        if name in names and param.is_floating_point():
            _init_parameter_(name, param, generator, std)
            done.append(name)
    return tuple(sorted(done))


#: the most outputs :func:`load_model` sizes a classification head to (a larger count is a mistake,
#: not a task: 10**9 labels would allocate 10**9 x hidden_size weights before anything is checked)
MAX_NUM_LABELS = 100_000


def load_model(name_or_path: str | Path, *, num_labels: int | None = None,
               generator: torch.Generator | None = None, **kwargs) -> nn.Module:
    """Load a classification model from a local ``save_pretrained`` directory or a hub name.

    The class is chosen from ``config.model_type``; ``num_labels`` sizes the head to the task (any
    number of classes; 1: a regression head, ``problem_type="regression"``): a checkpoint's head of
    that size is loaded, one of another size is dropped and drawn anew like a missing one. ``name_or_path`` may also be the short name of a model shipped
    with raptor (:mod:`raptor.shipped`). Weights load as float32 unless ``dtype`` is given
    (the shipped models are stored in float16). Raises :class:`UnsupportedModelError` for unknown
    families.

    Random draws: parameters the checkpoint lacks (a pre-trained backbone's new classification
    head, a resized head) are drawn from ``generator`` (normal(0, 0.02) matrices, zero biases:
    :func:`init_missing_`); pass the run's seeded or secure generator. ``None`` uses a fresh
    generator seeded with 0 (reproducible tests). transformers' own initialisation of those
    parameters draws from the global RNG; it runs inside ``fork_rng`` and is overwritten, so the
    global RNG is neither read for the result nor changed.

    A checkpoint saved from another head class (``config.architectures``, e.g. the shipped
    ``SwitchForMaskedLM``) is loaded into the classifier on purpose: transformers' UNEXPECTED /
    MISSING load report is dropped for that call only and raptor prints one line on stderr saying
    the head is new (:func:`new_head_line`), once per process for the same line (a grid loads the
    same checkpoint for every cell). A checkpoint of the same class keeps the full report.
    """
    from raptor.shipped import resolve

    _check_load_arguments(name_or_path, num_labels)
    given = name_or_path
    name_or_path = resolve(name_or_path)
    kwargs.setdefault("dtype", torch.float32)
    saved = _saved_config(name_or_path)
    model_type = saved.get("model_type")
    cls = classification_class(model_type)
    if num_labels is not None:
        kwargs["num_labels"] = num_labels
        # the task decides the head: a checkpoint's head of another size (minilm-moe's 2-way one for a
        # 3-class or a regression task) is dropped and redrawn from ``generator`` like a missing one
        kwargs["problem_type"] = "regression" if num_labels == 1 else None
        kwargs.setdefault("ignore_mismatched_sizes", True)
    kwargs.pop("output_loading_info", None)
    architectures = list(saved.get("architectures") or ())  # the class it was saved from; empty if unknown
    new_head = bool(architectures) and cls.__name__ not in architectures  # e.g. a masked-LM checkpoint
    saved_labels = checkpoint_num_labels(saved)
    resized = not new_head and num_labels is not None and saved_labels != num_labels
    quiet = without_load_report() if new_head or resized else contextlib.nullcontext()
    with torch.random.fork_rng(devices=[]), quiet:
        model, info = cls.from_pretrained(str(name_or_path), output_loading_info=True, **kwargs)
    missing = _missing_parameter_names(info)
    if missing:
        init_missing_(model, missing, generator if generator is not None else torch.Generator().manual_seed(0))
    if new_head:
        _announce_once(new_head_line(given, architectures[0], cls.__name__, missing, info.get("unexpected_keys") or ()))
    elif resized and missing:
        _announce_once(f"raptor: {given}'s head has {saved_labels} output(s) and the task needs {num_labels}: "
                       f"it is drawn anew ({', '.join(sorted(missing))})")
    model.eval()
    return model



def _check_load_arguments(name_or_path, num_labels) -> None:
    """:func:`load_model`'s name and ``num_labels``, refused in one line naming the argument."""
    if not isinstance(name_or_path, (str, Path)):
        raise ConfigError(f"load_model: name_or_path must be a model name or a save_pretrained directory (str or "
                          f"Path), e.g. load_model('minilm-moe', num_labels=2); got {type(name_or_path).__name__}")
    if not str(name_or_path).strip():
        raise ConfigError("load_model(''): the model name is empty; give a shipped or built model's name "
                          "(raptor.shipped.available()), a save_pretrained directory or a hub name (owner/name)")
    if num_labels is not None and (isinstance(num_labels, bool) or not isinstance(num_labels, int)
                                   or not 1 <= num_labels <= MAX_NUM_LABELS):
        raise ConfigError(f"num_labels must be an integer in [1, {MAX_NUM_LABELS:,}] (1: a regression head; the "
                          f"head is num_labels x hidden_size weights), got {num_labels!r}")


def _saved_config(name_or_path) -> dict:
    """The saved config of a local model directory or a hub name (refused in one line when neither)."""
    path = Path(name_or_path)
    if path.exists():
        config_file = path / "config.json"
        if not config_file.is_file():
            raise ConfigError(f"{path} is not a model directory: it has no config.json")
        return json.loads(config_file.read_text())
    name = str(name_or_path)
    if name in FAMILIES:
        raise ConfigError(f"load_model({name!r}): {name} is a tiny family with no weights to load; build it with "
                          f"raptor.moe.models.build_model({name!r}, ...), or load a shipped or built model by name "
                          "(raptor.shipped.available())")
    if name.startswith((".", "/", "~")) or "/" not in name:  # no hub name has that form
        from raptor.shipped import available

        raise ConfigError(f"load_model({name!r}): no such directory, shipped or built model; shipped and built "
                          f"models: {', '.join(available()) or 'none'}; or give a save_pretrained directory or "
                          "a hub name (owner/name)")
    return transformers.AutoConfig.from_pretrained(name).to_dict()


def checkpoint_num_labels(config: dict) -> int:
    """The head size a saved config declares (``id2label``'s length; 1 for ``problem_type`` regression;
    else ``num_labels``, else 2: the transformers default)."""
    id2label = config.get("id2label")
    if isinstance(id2label, dict) and id2label:
        return len(id2label)
    if config.get("problem_type") == "regression":
        return 1
    value = config.get("num_labels")
    return value if isinstance(value, int) and not isinstance(value, bool) else 2


#: the logger transformers writes its state-dict load report to (UNEXPECTED / MISSING keys)
HF_LOAD_REPORT_LOGGER = "transformers.modeling_utils"


def _is_load_report(record: logging.LogRecord) -> bool:
    return "LOAD REPORT" in record.getMessage()


#: ``with without_load_report(): from_pretrained(...)`` drops transformers' load report for that
#: call, and only it: the report record only, on the one logger that writes it, logged by the calling
#: thread inside the block (a load in another thread keeps its report; every later report is logged).
without_load_report = ScopedDrop(HF_LOAD_REPORT_LOGGER, _is_load_report)


_announced: set[str] = set()
_announced_lock = threading.Lock()


def _announce_once(line: str) -> None:
    """Print ``line`` on stderr unless this process printed the same line before."""
    with _announced_lock:
        if line in _announced:
            return
        _announced.add(line)
    print(line, file=sys.stderr)


def new_head_line(name, architecture: str, head_class: str, missing, unexpected, *, shown: int = 6) -> str:
    """The one line raptor prints instead of transformers' load report when a checkpoint of another
    head (``architecture``) is loaded into ``head_class`` on purpose."""

    def listed(names) -> str:
        names = sorted(names)
        more = f" and {len(names) - shown} more" if len(names) > shown else ""
        return ", ".join(names[:shown]) + more

    line = f"raptor: {name} is a {architecture} checkpoint; its {head_class} head is new"
    if missing:
        line += f" ({len(missing)} new parameters: {listed(missing)})"
    if unexpected:
        line += f"; checkpoint keys it does not use: {listed(unexpected)}"
    return line
