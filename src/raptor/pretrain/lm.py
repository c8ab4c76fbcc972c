"""Language-model heads for public pre-training, one code path for every family.

* Switch Transformers (encoder only): :class:`SwitchForMaskedLM` is the encoder raptor fine-tunes
  (``switch``) plus a masked-token head tied to the input embedding (logits = h E^T + b);
  ``bert_moe`` (an upcycled BERT): :class:`raptor.moe.bert_moe.BertMoeForMaskedLM`, the same shape;
* :func:`lm_from_checkpoint`: the pre-training model of an existing checkpoint (continued pre-training).
* The decoder families (OLMoE, Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3): the family's own
  ``*ForCausalLM`` class from ``transformers`` (``AutoModelForCausalLM``), whose backbone is
  ``model`` like their sequence-classification classes.

Either way, ``save_pretrained`` writes a directory that :func:`raptor.moe.models.load_model`
loads as the classification model: the backbone weights match by name, the LM head is dropped
and the classification head is new.

Random draws: weights come from an explicit ``torch.Generator`` (:func:`init_weights_`).

Legend: B batch, T tokens, D hidden, V vocabulary, M masked positions.
"""

from __future__ import annotations

import sys

import torch
import transformers
from torch import nn
from transformers import PretrainedConfig
from transformers.models.switch_transformers.modeling_switch_transformers import (
    SwitchTransformersEncoderModel,
    SwitchTransformersPreTrainedModel,
)

from raptor.errors import UnsupportedModelError
from raptor.moe.adapters import get_adapter
from raptor.moe.models import FAMILIES, init_weights_, without_load_report

MLM_FAMILIES = tuple(f for f in FAMILIES if get_adapter(f).pretrain_objective == "mlm")


def routes_top1(family: str) -> bool:
    """Whether ``family`` routes every token to one expert (no top-k to set)."""
    return bool(get_adapter(family).top1)
CAUSAL_FAMILIES = tuple(f for f in FAMILIES if f not in MLM_FAMILIES)


class SwitchForMaskedLM(SwitchTransformersPreTrainedModel):
    """Switch encoder + a masked-token head tied to the input embedding (plus a bias ``lm_bias``)."""

    base_model_prefix = "switch"
    _tied_weights_keys = {}  # noqa: RUF012 - the head reads the embedding matrix directly

    def __init__(self, config: PretrainedConfig):
        super().__init__(config)
        self.switch = SwitchTransformersEncoderModel(config)
        self.lm_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.switch.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.switch.set_input_embeddings(value)

    def hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.switch(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def token_logits(self, hidden_MD: torch.Tensor) -> torch.Tensor:
        """Logits over the vocabulary for the given hidden rows ``[..., D] -> [..., V]``."""
        return nn.functional.linear(hidden_MD, self.get_input_embeddings().weight, self.lm_bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
        return self.token_logits(self.hidden(input_ids, attention_mask))


def objective(family: str) -> str:
    """``"mlm"`` for encoder-only families, ``"causal"`` for decoders."""
    if family in MLM_FAMILIES:
        return "mlm"
    if family in CAUSAL_FAMILIES:
        return "causal"
    raise UnsupportedModelError(f"cannot pre-train family {family!r}; supported: {', '.join(FAMILIES)}")


def _mlm_class(family: str):
    """The masked-LM class of an encoder family (``hidden`` / ``token_logits``, as Switch's)."""
    if family == "bert_moe":
        from raptor.moe.bert_moe import BertMoeForMaskedLM

        return BertMoeForMaskedLM
    return SwitchForMaskedLM


def build_lm(config: PretrainedConfig, generator: torch.Generator) -> nn.Module:
    """A random-weight pre-training model for ``config`` (weights from ``generator``)."""
    family = config.model_type
    with torch.random.fork_rng(devices=[]):  # constructors' default init draws are overwritten below
        if objective(family) == "mlm":
            model = _mlm_class(family)(config)
        else:
            model = transformers.AutoModelForCausalLM.from_config(config)
    init_weights_(model, generator)
    return model


def lm_from_checkpoint(path: str, generator: torch.Generator) -> nn.Module:
    """The pre-training model of an existing checkpoint (``raptor pretrain --init-from``): its config
    and every backbone weight it holds (a classification or a pre-training checkpoint of the same
    family); the parameters it lacks (a new masked-LM head, the LM head of a classifier checkpoint)
    drawn from ``generator``. Public continued pre-training of, e.g., an upcycled model, so that its
    experts and routers can diverge."""
    from raptor.moe.models import init_missing_

    config = transformers.AutoConfig.from_pretrained(path)
    family = config.model_type
    cls = _mlm_class(family) if objective(family) == "mlm" else transformers.AutoModelForCausalLM
    with torch.random.fork_rng(devices=[]), without_load_report():  # one line of ours instead of HF's table
        model, info = cls.from_pretrained(path, output_loading_info=True, dtype=torch.float32)
    missing = set(info.get("missing_keys") or ())
    init_missing_(model, missing, generator)
    unused = info.get("unexpected_keys") or ()
    print(f"raptor pretrain: --init-from {path}: {len(missing)} parameters it lacks drawn from the seed "
          f"({_modules(missing)}); {len(unused)} of its weights not used ({_modules(unused)})", file=sys.stderr)
    return model


def _modules(names) -> str:
    """``mlm_head.dense.weight, mlm_head.bias, classifier.weight`` -> ``classifier, mlm_head``."""
    return ", ".join(sorted({name.split(".")[0] for name in names})) or "none"


def lm_backbone_hidden(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Last hidden states ``[B, T, D]`` of either kind of pre-training model."""
    if hasattr(model, "token_logits"):  # a masked-LM model (Switch, bert_moe)
        return model.hidden(input_ids, attention_mask)
    return model.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state


def lm_logits(model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """Vocabulary logits for hidden rows of either kind of pre-training model."""
    if hasattr(model, "token_logits"):
        return model.token_logits(hidden)
    return model.lm_head(hidden)
