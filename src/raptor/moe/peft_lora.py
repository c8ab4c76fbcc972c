"""PEFT LoRA wrapping, in one place.

peft 0.21 reads ``PreTrainedModel.is_gradient_checkpointing`` while wrapping, which transformers
5.23 deprecates with a ``FutureWarning`` on every call; that warning is about PEFT's code, not
the user's, so it is silenced here (only that message, only around the wrapping).
"""

from __future__ import annotations

import warnings

from torch import nn


def peft_lora(model: nn.Module, **lora_config) -> nn.Module:
    """``peft.get_peft_model(model, LoraConfig(**lora_config))``, without PEFT's deprecation noise."""
    from peft import LoraConfig, get_peft_model

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        return get_peft_model(model, LoraConfig(**lora_config))
