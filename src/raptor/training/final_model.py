"""The run's initial weights (for exact resume) and its final model (for use).

* :func:`initial_weights_writer`: checkpoint artifacts holding the model as it was when training
  started: every weight that is not read unchanged from a base checkpoint (:func:`base_weights`:
  a tiny family's random init, a freshly drawn head, ...), and the tokenizer. A resumed run loads
  them before anything is computed from the model (public routing, owner shares, layer choice,
  clip norms), so it recomputes the same public statistics instead of redrawing a model.
* :func:`save_final_model`: ``OUTPUT_DIR/model``, a ``save_pretrained`` directory with the
  tokenizer and the label map (``config.id2label`` and ``raptor_labels.json``), which
  ``raptor predict --model OUTPUT_DIR`` and ``load_model`` read. It holds no generator state.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from raptor.errors import CheckpointError
from raptor.training.checkpoint import full_state, resolve_checkpoint, verify_files

INITIAL = "initial.safetensors"
TOKENIZER = "tokenizer"
LABELS = "raptor_labels.json"


def base_weights(model_dir: str | Path | None) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` of the weights stored in a ``save_pretrained`` directory's safetensors files
    (empty for anything else: a tiny family, a hub name, a ``.bin`` checkpoint)."""
    if model_dir is None or not Path(model_dir).is_dir():
        return {}
    from safetensors import safe_open

    out = {}
    for file in sorted(Path(model_dir).glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt") as f:
                out.update({k: tuple(f.get_slice(k).get_shape()) for k in f.keys()})
        except (SafetensorError, OSError) as err:
            raise CheckpointError(f"{file}: cannot be read ({err}); check the --model directory") from err
    return out


def initial_weights_writer(model: nn.Module, tokenizer, base: dict[str, tuple[int, ...]] | None = None) -> dict:
    """``{name: writer}`` artifacts for :func:`raptor.training.checkpoint.save_checkpoint`: the weights
    of ``model`` that ``base`` (:func:`base_weights` of the directory it was loaded from) does not
    hold with the same shape, and the tokenizer."""
    base = base or {}
    state = {k: v for k, v in full_state(model).items() if base.get(k) != tuple(v.shape)}
    return {INITIAL: lambda p: save_file(state, str(p)),
            TOKENIZER: lambda p: tokenizer.save_pretrained(str(p))}


def load_initial_weights(checkpoint: str | Path, model: nn.Module):
    """Load the run's initial weights (those not in its base checkpoint) into ``model``; return
    ``(model, tokenizer)`` with the checkpoint's tokenizer."""
    from raptor.data import load_tokenizer
    from raptor.training.checkpoint import read_state

    state = read_state(checkpoint)
    path = resolve_checkpoint(checkpoint)
    verify_files(path, state)
    file = path / INITIAL
    if not file.is_file():
        raise CheckpointError(f"{file}: missing; this checkpoint cannot be resumed exactly; start a new run")
    try:
        saved = load_file(str(file))
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{file}: cannot be read ({err}); start a new run") from err
    own = model.state_dict(keep_vars=True)
    if not set(saved) <= set(own) or any(saved[k].shape != own[k].shape for k in saved):
        raise CheckpointError(f"{file}: the initial weights do not fit this --model and its sizes; resume with "
                              "the model, sizes and tokenizer of the run that wrote the checkpoint")
    import torch

    with torch.no_grad():
        for k, t in saved.items():
            own[k].copy_(t)
    return model, load_tokenizer(path / TOKENIZER)


def save_final_model(path: str | Path, model: nn.Module, tokenizer, label_names: Sequence[str],
                     max_length: int | None = None) -> Path:
    """Write ``path`` (replacing it): ``save_pretrained`` weights and config with the label map,
    the tokenizer, and ``raptor_labels.json`` (label names, and the run's ``max_length``, which
    ``raptor predict`` uses by default). PEFT adapters are merged into a copy first."""
    import copy

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    final = model
    if hasattr(final, "merge_and_unload"):  # PEFT LoRA: a plain model a user can load
        final = copy.deepcopy(model).merge_and_unload()
    final.config.id2label = {i: str(n) for i, n in enumerate(label_names)}
    final.config.label2id = {str(n): i for i, n in enumerate(label_names)}
    final.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    (tmp / LABELS).write_text(json.dumps({"label_names": [str(n) for n in label_names], "max_length": max_length},
                                         indent=2) + "\n")
    if path.exists():
        shutil.rmtree(path)
    tmp.rename(path)
    return path


def read_max_length(path: str | Path) -> int | None:
    """The ``max_length`` saved by :func:`save_final_model` (None if not saved)."""
    file = Path(path) / LABELS
    try:
        value = json.loads(file.read_text()).get("max_length")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    return value if isinstance(value, int) else None


def read_label_names(path: str | Path) -> list[str]:
    """The label names saved by :func:`save_final_model`."""
    file = Path(path) / LABELS
    if not file.is_file():
        raise CheckpointError(f"{file}: missing; --model must be the model directory a raptor run wrote "
                              "(OUTPUT_DIR/model or OUTPUT_DIR)")
    try:
        return list(json.loads(file.read_text())["label_names"])
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise CheckpointError(f"{file}: corrupt label map ({err})") from err
