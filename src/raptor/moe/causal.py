"""Causal language models (an LM head over the vocabulary) for the generative objective.

* Text decoder families (OLMoE, Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3): the ``*ForCausalLM``
  class of ``transformers``, tiny random (:func:`build_causal_lm`, the same tiny configs as the
  classifiers of :mod:`raptor.moe.models`) or from a local ``save_pretrained`` directory.
* DeepSeek-VL2 (``model_type`` ``deepseek_vl_v2``): raptor's own implementation in
  :mod:`raptor.moe.vl2`, loaded from a directory in the release's layout, no remote code.

Switch Transformers is an encoder-decoder; it has no decoder-only causal LM here.

Random draws: weights come from an explicit ``torch.Generator``; the global RNG is not used.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from raptor.errors import ConfigError, UnsupportedModelError
from raptor.moe.adapters import get_adapter, supported_model_types
from raptor.moe.models import TinySize, init_weights_, tiny_config

VL2_MODEL_TYPE = "deepseek_vl_v2"
#: text decoder families with a causal LM (the adapter records' ``causal_class``)
CAUSAL_CLASSES: tuple[str, ...] = tuple(t for t in supported_model_types()
                                        if get_adapter(t).causal_class is not None and t != VL2_MODEL_TYPE)
GENERATIVE_FAMILIES: tuple[str, ...] = (*CAUSAL_CLASSES, VL2_MODEL_TYPE)


def causal_lm_class(model_type: str):
    if model_type not in GENERATIVE_FAMILIES:
        raise UnsupportedModelError(
            f"no causal LM for model_type {model_type!r} (--objective generate); supported: "
            f"{', '.join(GENERATIVE_FAMILIES)}"
        )
    return get_adapter(model_type).causal_lm_class()


def build_causal_lm(family: str, *, size: TinySize | None = None, generator: torch.Generator | None = None,
                    **overrides) -> nn.Module:
    """A tiny random causal LM of a text family (aux losses and jitter off, as the classifiers)."""
    cls = causal_lm_class(family)
    config = tiny_config(family, size=size, **overrides)
    with torch.random.fork_rng(devices=[]):  # constructor draws are overwritten below
        model = cls(config)
    init_weights_(model, generator if generator is not None else torch.Generator().manual_seed(0))
    model.eval()
    return model


def load_causal_lm(path: str | Path, *, dtype: torch.dtype = torch.float32) -> nn.Module:
    """A causal LM from a local directory: ``save_pretrained`` layout, or DeepSeek-VL2's release layout."""
    path = Path(path)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ConfigError(f"--model {path}: not a model directory (no config.json)")
    model_type = json.loads(config_file.read_text()).get("model_type")
    if model_type == VL2_MODEL_TYPE:
        from raptor.moe.vl2 import load_vl2

        return load_vl2(path, dtype=dtype)
    if model_type not in CAUSAL_CLASSES:
        causal_lm_class(model_type)  # raises, naming the supported families
    model = causal_lm_class(model_type).from_pretrained(str(path), dtype=dtype)
    model.eval()
    return model
