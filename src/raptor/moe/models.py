"""Small Hugging Face MoE models with a sequence-classification head, for every supported family.

Two jobs live here:

* :func:`tiny_config` / :func:`build_model` make small random-weight models from configs, so that
  tests, benchmarks and the demo run on a CPU without a model hub.
* :func:`load_model` loads a model from a local directory written by ``save_pretrained`` (the
  same code path a user takes with ``google/switch-base-8`` or ``allenai/OLMoE-1B-7B-0924``), or
  from a hub name where the hub is reachable.

Two families have no sequence-classification class in ``transformers``:

* Switch Transformers: :class:`SwitchForSequenceClassification` runs the encoder only, then a
  masked mean-pooling and a linear head (the reference code's choice).
* OLMoE: :class:`OlmoeForSequenceClassification` subclasses ``OlmoePreTrainedModel`` so that the
  experts implementation can still be switched with ``set_experts_implementation``; it pools the
  last non-pad token like the other decoder families' heads.

Random draws: weights are (re)initialised from an explicit ``torch.Generator``; the global RNG is
neither read nor seeded.

Legend of shape suffixes: B batch (records), T tokens per record, D hidden size, K labels.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from torch import nn
from transformers import CONFIG_MAPPING, PretrainedConfig
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.models.olmoe.modeling_olmoe import OlmoeModel, OlmoePreTrainedModel
from transformers.models.switch_transformers.modeling_switch_transformers import (
    SwitchTransformersEncoderModel,
    SwitchTransformersPreTrainedModel,
)

from raptor.errors import ConfigError, UnsupportedModelError

FAMILIES: tuple[str, ...] = (
    "switch_transformers",
    "olmoe",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
)


def _unknown_family(name: str) -> UnsupportedModelError:
    return UnsupportedModelError(
        f"unknown model family {name!r}; supported families are: {', '.join(FAMILIES)}"
    )


# --------------------------------------------------------------------------------------------
# Heads for the two families transformers has none for
# --------------------------------------------------------------------------------------------


def _classification_loss(logits_BK: torch.Tensor, labels_B: torch.Tensor | None, reduction: str):
    if labels_B is None:
        return None
    return nn.functional.cross_entropy(logits_BK.float(), labels_B, reduction=reduction)


class SwitchForSequenceClassification(SwitchTransformersPreTrainedModel):
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

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        loss_reduction: str = "mean",
        **kwargs,
    ) -> SequenceClassifierOutput:
        hidden_BTD = self.switch(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        if attention_mask is None:
            attention_mask = torch.ones(hidden_BTD.shape[:2], dtype=hidden_BTD.dtype, device=hidden_BTD.device)
        mask_BT1 = attention_mask.to(hidden_BTD.dtype).unsqueeze(-1)
        # A record with no tokens pools to zero (clamp the count, not the values).
        pooled_BD = (hidden_BTD * mask_BT1).sum(dim=1) / mask_BT1.sum(dim=1).clamp(min=1.0)
        logits_BK = self.classifier(pooled_BD)
        return SequenceClassifierOutput(loss=_classification_loss(logits_BK, labels, loss_reduction), logits=logits_BK)


def _last_token_pool(hidden_BTD: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Hidden state of each record's last non-pad token (right padding); token 0 for an empty record."""
    B, T, _ = hidden_BTD.shape
    if attention_mask is None:
        last_B = torch.full((B,), T - 1, dtype=torch.long, device=hidden_BTD.device)
    else:
        last_B = (attention_mask.long().sum(dim=1) - 1).clamp(min=0)
    return hidden_BTD[torch.arange(B, device=hidden_BTD.device), last_B]


class OlmoeForSequenceClassification(OlmoePreTrainedModel):
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

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        loss_reduction: str = "mean",
        **kwargs,
    ) -> SequenceClassifierOutput:
        hidden_BTD = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        logits_BK = self.score(_last_token_pool(hidden_BTD, attention_mask))
        return SequenceClassifierOutput(loss=_classification_loss(logits_BK, labels, loss_reduction), logits=logits_BK)


def _hf_class(name: str):
    return getattr(transformers, name)


#: model_type -> the class with a sequence-classification head that raptor trains.
_CLASSES = {
    "switch_transformers": lambda: SwitchForSequenceClassification,
    "olmoe": lambda: OlmoeForSequenceClassification,
    "mixtral": lambda: _hf_class("MixtralForSequenceClassification"),
    "qwen2_moe": lambda: _hf_class("Qwen2MoeForSequenceClassification"),
    "qwen3_moe": lambda: _hf_class("Qwen3MoeForSequenceClassification"),
    "deepseek_v2": lambda: _hf_class("DeepseekV2ForSequenceClassification"),
    "deepseek_v3": lambda: _hf_class("DeepseekV3ForSequenceClassification"),
}


def classification_class(model_type: str):
    """The sequence-classification class raptor uses for ``model_type``."""
    if model_type not in _CLASSES:
        raise _unknown_family(model_type)
    return _CLASSES[model_type]()


# --------------------------------------------------------------------------------------------
# Tiny configs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TinySize:
    """The size knobs shared by every family's tiny config."""

    vocab_size: int = 512
    hidden_size: int = 32
    num_layers: int = 2
    num_heads: int = 4
    num_experts: int = 4
    top_k: int = 2
    expert_intermediate: int = 32
    max_positions: int = 256

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_experts", "top_k",
                     "expert_intermediate", "max_positions"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"TinySize.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_heads:
            raise ConfigError(
                f"TinySize.hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})"
            )
        if self.top_k > self.num_experts:
            raise ConfigError(f"TinySize.top_k ({self.top_k}) must be <= num_experts ({self.num_experts})")


def _family_kwargs(family: str, s: TinySize) -> dict:
    """Family-specific config fields for a tiny model with batch-coupling features switched off.

    Privacy: load-balancing (aux) losses, z-losses and router jitter are all set to zero, and
    router logits are not returned, so nothing couples records or draws hidden randomness.
    """
    head_dim = s.hidden_size // s.num_heads
    decoder = dict(
        vocab_size=s.vocab_size,
        hidden_size=s.hidden_size,
        num_hidden_layers=s.num_layers,
        num_attention_heads=s.num_heads,
        num_key_value_heads=s.num_heads,
        intermediate_size=2 * s.hidden_size,
        max_position_embeddings=s.max_positions,
        num_experts_per_tok=s.top_k,
        output_router_logits=False,
        router_aux_loss_coef=0.0,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        attention_dropout=0.0,
    )
    if family == "switch_transformers":
        return dict(
            vocab_size=s.vocab_size,
            d_model=s.hidden_size,
            d_kv=head_dim,
            d_ff=s.expert_intermediate,
            num_heads=s.num_heads,
            num_layers=s.num_layers,
            num_decoder_layers=s.num_layers,
            num_sparse_encoder_layers=s.num_layers,
            num_sparse_decoder_layers=s.num_layers,
            encoder_sparse_step=1,
            decoder_sparse_step=1,
            num_experts=s.num_experts,
            expert_capacity=s.max_positions,
            router_jitter_noise=0.0,
            router_z_loss_coef=0.0,
            router_aux_loss_coef=0.0,
            dropout_rate=0.0,
            pad_token_id=0,
            eos_token_id=1,
            decoder_start_token_id=0,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=32,
        )
    if family == "olmoe":
        return dict(decoder, num_experts=s.num_experts, intermediate_size=s.expert_intermediate,
                    norm_topk_prob=False)
    if family == "mixtral":
        return dict(decoder, num_local_experts=s.num_experts, intermediate_size=s.expert_intermediate,
                    router_jitter_noise=0.0, head_dim=head_dim)
    if family == "qwen2_moe":
        return dict(decoder, num_experts=s.num_experts, moe_intermediate_size=s.expert_intermediate,
                    shared_expert_intermediate_size=s.expert_intermediate, decoder_sparse_step=1,
                    norm_topk_prob=False, max_window_layers=s.num_layers, layer_types=None)
    if family == "qwen3_moe":
        return dict(decoder, num_experts=s.num_experts, moe_intermediate_size=s.expert_intermediate,
                    decoder_sparse_step=1, norm_topk_prob=True, head_dim=head_dim, layer_types=None)
    if family in ("deepseek_v2", "deepseek_v3"):
        common = dict(decoder, n_routed_experts=s.num_experts, n_shared_experts=1,
                      moe_intermediate_size=s.expert_intermediate, first_k_dense_replace=0,
                      kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=head_dim // 2 or 1,
                      qk_nope_head_dim=head_dim, v_head_dim=head_dim, head_dim=head_dim // 2 or 1,
                      routed_scaling_factor=1.0, n_group=1, topk_group=1, norm_topk_prob=False)
        if family == "deepseek_v2":
            common.update(topk_method="greedy")
        else:
            common.update(num_nextn_predict_layers=0, rope_interleave=False)
        return common
    raise _unknown_family(family)


def tiny_config(family: str, *, num_labels: int = 2, size: TinySize | None = None, **overrides) -> PretrainedConfig:
    """A small config of ``family`` with a ``num_labels``-way classification head.

    ``overrides`` are set on the config last (for example ``num_layers=4`` for Switch).
    """
    if family not in FAMILIES:
        raise _unknown_family(family)
    if num_labels < 2:
        raise ConfigError(f"num_labels must be >= 2, got {num_labels}")
    kwargs = _family_kwargs(family, size or TinySize())
    kwargs.update(overrides)
    config = CONFIG_MAPPING[family](**kwargs)
    config.num_labels = num_labels
    return config


@torch.no_grad()
def init_weights_(model: nn.Module, generator: torch.Generator, std: float = 0.02) -> nn.Module:
    """Re-initialise every floating parameter from ``generator`` (normal(0, std) for matrices,
    ones for norm weights, zeros for biases). Buffers are left as built.

    Privacy: uses only the explicit generator; the global RNG is not touched.
    """
    for name, param in model.named_parameters():
        if not param.is_floating_point():
            continue
        leaf = name.rsplit(".", 1)[-1]
        if param.ndim >= 2:
            param.copy_(torch.randn(param.shape, generator=generator, dtype=torch.float32).mul_(std).to(param.dtype))
        elif leaf == "bias" or name.endswith("_bias"):
            param.zero_()
        else:  # 1-D weights: norm scales
            param.fill_(1.0)
    return model


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


def load_model(name_or_path: str | Path, *, num_labels: int | None = None, **kwargs) -> nn.Module:
    """Load a classification model from a local ``save_pretrained`` directory or a hub name.

    The class is chosen from ``config.model_type``; ``num_labels`` resizes the head when the
    checkpoint has none of that size. ``name_or_path`` may also be the short name of a model shipped
    with raptor (:mod:`raptor.pretrain.shipped`). Weights load as float32 unless ``dtype`` is given
    (the shipped models are stored in float16). Raises :class:`UnsupportedModelError` for unknown
    families.
    """
    from raptor.pretrain.shipped import resolve

    name_or_path = resolve(name_or_path)
    kwargs.setdefault("dtype", torch.float32)
    path = Path(name_or_path)
    if path.exists():
        config_file = path / "config.json"
        if not config_file.is_file():
            raise ConfigError(f"{path} is not a model directory: it has no config.json")
        model_type = json.loads(config_file.read_text()).get("model_type")
    else:
        model_type = transformers.AutoConfig.from_pretrained(str(name_or_path)).model_type
    cls = classification_class(model_type)
    if num_labels is not None:
        kwargs["num_labels"] = num_labels
    model = cls.from_pretrained(str(name_or_path), **kwargs)
    model.eval()
    return model
