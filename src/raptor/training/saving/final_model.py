"""The final model of a run, for use: writing it and reading its label map back.

* :func:`save_final_model`: ``OUTPUT_DIR/model``, a ``save_pretrained`` directory with the
  tokenizer and the label map (``config.id2label`` and ``raptor_labels.json``), which
  ``raptor predict --model OUTPUT_DIR`` and ``load_model`` read; for a generative run
  (``label_names=None``) no label map, and a DeepSeek-VL2 model in its release layout (what
  ``load_vl2`` reads). It holds no generator state.
* :func:`read_label_names` / :func:`read_max_length`: what ``raptor predict`` reads back.

How a run starts or resumes (its initial weights in each checkpoint) is :mod:`raptor.training.run.start`.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from torch import nn

from raptor.errors import CheckpointError

LABELS = "raptor_labels.json"


def plain_model(model: nn.Module) -> nn.Module:
    """``model`` without adapters, for saving: PEFT LoRA and raptor's per-expert LoRA on fused
    experts (:func:`raptor.moe.expert_lora.merge_expert_lora`) merged into a copy; ``model`` itself
    is left as it is."""
    import copy

    from raptor.moe.expert_lora import has_expert_lora, merge_expert_lora

    expert_lora = any(has_expert_lora(m) for m in model.modules())
    if not expert_lora and not hasattr(model, "merge_and_unload"):
        return model
    final = copy.deepcopy(model)
    if hasattr(final, "merge_and_unload"):  # PEFT LoRA: a plain model a user can load
        final = final.merge_and_unload()
    return merge_expert_lora(final) if expert_lora else final


def save_final_model(path: str | Path, model: nn.Module, tokenizer, label_names: Sequence[str] | None,
                     max_length: int | None = None) -> Path:
    """Write ``path`` (replacing it): ``save_pretrained`` weights and config, the tokenizer, and
    ``raptor_labels.json`` (label names, and the run's ``max_length``, which ``raptor predict``
    uses by default). ``label_names``: the classes (also written as ``config.id2label``), or None
    for a generative model (no label map; ``"objective": "generate"``). A DeepSeek-VL2 model is
    written in its release layout (:func:`raptor.moe.vl2.release_files.save_release_checkpoint`).
    PEFT adapters are merged into a copy first."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    final = plain_model(model)
    if label_names is not None:
        final.config.id2label = {i: str(n) for i, n in enumerate(label_names)}
        final.config.label2id = {str(n): i for i, n in enumerate(label_names)}
    if hasattr(final, "save_pretrained"):
        final.save_pretrained(str(tmp))
    else:
        from raptor.moe.vl2.release_files import save_release_checkpoint

        save_release_checkpoint(final, tmp)
    tokenizer.save_pretrained(str(tmp))
    write_label_map(tmp, label_names, max_length)
    if path.exists():
        shutil.rmtree(path)
    tmp.rename(path)
    return path


def write_label_map(path: str | Path, label_names: Sequence[str] | None, max_length: int | None = None) -> Path:
    """``path/raptor_labels.json``: the label names (None: a generative model, ``"objective":
    "generate"``; []: a regression head) and ``max_length``, what ``raptor predict`` reads."""
    meta = {"label_names": None if label_names is None else [str(n) for n in label_names], "max_length": max_length}
    if label_names is None:
        meta["objective"] = "generate"
    file = Path(path) / LABELS
    file.write_text(json.dumps(meta, indent=2) + "\n")
    return file


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
    damaged = ("the model directory is damaged: restore raptor_labels.json from a copy of the run, or train the "
               "model again")
    try:
        meta = json.loads(file.read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{file}: corrupt label map (not valid JSON: {err}); {damaged}") from err
    if not isinstance(meta, dict):
        raise CheckpointError(f"{file}: corrupt label map (a JSON {type(meta).__name__}, expected an object with "
                              f"label_names); {damaged}")
    if meta.get("objective") == "generate":
        raise CheckpointError(f"{Path(path)}: a generative model (raptor train --objective generate) has no "
                              "label map; raptor predict takes a classifier's OUTPUT_DIR")
    names = meta.get("label_names")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise CheckpointError(f"{file}: corrupt label map (label_names is {type(names).__name__ if names is not None else 'missing'}"
                              f", expected a list of label names); {damaged}")
    return names


def load_final_model(path: str | Path, device: str = "cpu"):
    """(model, tokenizer, label names, max length) of a final model written by :func:`save_final_model`
    (``raptor predict``); no label names means a regression head."""
    from raptor.data import load_tokenizer
    from raptor.moe.models import load_model

    names = read_label_names(path)  # a damaged map is refused before the weights are read
    model = load_model(path).to(device)
    check_label_map(path, names, model)
    return model, load_tokenizer(path), names, read_max_length(path)


def check_label_map(path: str | Path, names: list[str], model) -> None:
    """Refuse a label map whose size is not the head's: a name per output of a classifier, none for
    a one-output regression head (else each prediction would carry another class's name)."""
    outputs = int(getattr(model.config, "num_labels", 0) or 0)
    if len(names) == outputs or (not names and outputs == 1):
        return
    have = f"{len(names)} label names" if names else "no label names (a regression head)"
    raise CheckpointError(f"{Path(path) / LABELS}: {have}, but the model's head has {outputs} outputs "
                          f"(config.json num_labels); the label map is not this model's: restore the run's own "
                          f"raptor_labels.json, or train the model again")
