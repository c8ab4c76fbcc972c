"""Classification heads for the two families ``transformers`` has none for.

* Switch Transformers: :class:`SwitchForSequenceClassification` runs the encoder only, then a
  masked mean-pooling and a linear head (the reference code's choice).
* OLMoE: :class:`OlmoeForSequenceClassification` subclasses ``OlmoePreTrainedModel`` so that the
  experts implementation can still be switched with ``set_experts_implementation``; it pools the
  last non-pad token like the other decoder families' heads.

Legend of shape suffixes: B batch (records), T tokens per record, D hidden size, K labels.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PretrainedConfig
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.models.olmoe.modeling_olmoe import OlmoeModel, OlmoePreTrainedModel
from transformers.models.switch_transformers.modeling_switch_transformers import (
    SwitchTransformersEncoderModel,
    SwitchTransformersPreTrainedModel,
)


def _classification_loss(logits_BK: torch.Tensor, labels_B: torch.Tensor | None, reduction: str):
    if labels_B is None:
        return None
    if logits_BK.shape[-1] == 1:  # a regression head: squared error against float targets
        return nn.functional.mse_loss(logits_BK.float()[:, 0], labels_B.float(), reduction=reduction)
    return nn.functional.cross_entropy(logits_BK.float(), labels_B, reduction=reduction)


class _ClassifierForward:
    """The forward of both heads: ``pooled_logits`` (the class's own pooling and head), then the loss."""

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        loss_reduction: str = "mean",
        **kwargs,
    ) -> SequenceClassifierOutput:
        logits_BK = self.pooled_logits(input_ids, attention_mask)
        return SequenceClassifierOutput(loss=_classification_loss(logits_BK, labels, loss_reduction), logits=logits_BK)


class SwitchForSequenceClassification(_ClassifierForward, SwitchTransformersPreTrainedModel):
    """Switch Transformer encoder + masked mean pooling + linear head.

    The encoder's sparse layers route tokens with the family's top-1 router; expert capacity is
    counted per sequence, so it does not couple records.
    """

    base_model_prefix = "switch"
    _tied_weights_keys = {}  # noqa: RUF012 - encoder-only: no decoder embedding to tie to

    def __init__(self, config: PretrainedConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.switch = SwitchTransformersEncoderModel(config)
        self.classifier = nn.Linear(config.d_model, config.num_labels)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.switch.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.switch.set_input_embeddings(value)

    def pooled_logits(self, input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None) -> torch.Tensor:
        hidden_BTD = self.switch(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        if attention_mask is None:
            attention_mask = torch.ones(hidden_BTD.shape[:2], dtype=hidden_BTD.dtype, device=hidden_BTD.device)
        mask_BT1 = attention_mask.to(hidden_BTD.dtype).unsqueeze(-1)
        # A record with no tokens pools to zero (clamp the count, not the values).
        pooled_BD = (hidden_BTD * mask_BT1).sum(dim=1) / mask_BT1.sum(dim=1).clamp(min=1.0)
        return self.classifier(pooled_BD)


def _last_token_pool(hidden_BTD: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Hidden state of each record's last non-pad token (right padding); token 0 for an empty record."""
    B, T, _ = hidden_BTD.shape
    if attention_mask is None:
        last_B = torch.full((B,), T - 1, dtype=torch.long, device=hidden_BTD.device)
    else:
        last_B = (attention_mask.long().sum(dim=1) - 1).clamp(min=0)
    return hidden_BTD[torch.arange(B, device=hidden_BTD.device), last_B]


class OlmoeForSequenceClassification(_ClassifierForward, OlmoePreTrainedModel):
    """OLMoE decoder + last-non-pad-token pooling + linear head (``score``), like the other decoders."""

    def __init__(self, config: PretrainedConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = OlmoeModel(config)
        self.score = nn.Linear(config.hidden_size, config.num_labels, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.model.embed_tokens = value

    def pooled_logits(self, input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None) -> torch.Tensor:
        hidden_BTD = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        return self.score(_last_token_pool(hidden_BTD, attention_mask))
