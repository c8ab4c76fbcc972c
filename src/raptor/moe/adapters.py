"""Adapters: one small description per Hugging Face MoE family, in a registry keyed on ``model_type``.

An adapter tells the per-record engine (and everything else in raptor) where each MoE layer's
router, experts and shared experts live (declared attribute names, never probed), how tokens are
routed (top-1, or top-k read from a declared config field), how its expert dispatch is installed
in the engine (``dispatch``), its LoRA targets, its classification class, the fields of its tiny
random config and which batch-coupling features must be switched off. Adding a family is one
:class:`MoEAdapter` entry (and its name in the tests' family lists).

Policies every adapter enforces in :meth:`MoEAdapter.prepare` (DESIGN.md section 5):

* aux losses: batch-wide load-balancing / z-losses couple records (OLMoE, Mixtral and Qwen compute
  theirs over the whole batch), so their coefficients are set to 0 and router logits are not
  returned; the engine never reads the model's own loss, it computes per-record cross-entropy from
  the logits;
* router jitter: set to 0 (it is not DP noise and draws from the global RNG);
* dropout: set to 0 (draws from the global RNG and would make the engine and the one-record
  reference disagree);
* data-updated buffers (DeepSeek-V3's ``e_score_correction_bias``): kept as frozen buffers, never
  trained and never updated from data;
* Switch expert capacity is counted per sequence, so it does not couple records.

Privacy: nothing here reads data.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from torch import nn

from raptor.errors import ConfigError, UnsupportedModelError
from raptor.roles.groups import ExpertParams

_LAYER_RE = re.compile(r"(?:^|\.)(?:layers|block|h)\.(\d+)\.")


def block_prefix(module_name: str) -> str:
    """The name of the transformer block that contains ``module_name`` (``...layers.3`` of
    ``...layers.3.mlp``); ``module_name`` itself when it is in no numbered block."""
    match = _LAYER_RE.search(module_name + ".")
    return module_name[:match.end() - 1] if match else module_name


@dataclass(frozen=True)
class MoELayerInfo:
    """One MoE layer of a model (``index`` is its transformer-block index)."""

    index: int
    name: str
    num_experts: int
    top_k: int
    router: nn.Module
    experts: nn.Module
    shared_experts: tuple[nn.Module, ...]
    fused: bool
    dispatch: str = "fused"

    def expert_params(self) -> ExpertParams:
        prefix = f"{self.name}.{self.experts_attr}"
        if self.fused:
            fused = tuple(f"{prefix}.{n}" for n, p in self.experts.named_parameters(recurse=False) if p.ndim == 3)
            return ExpertParams(self.index, self.num_experts, fused=fused, prefix=prefix)
        names = tuple(f"{prefix}.{n}" for n, _ in self.experts.named_children())
        return ExpertParams(self.index, self.num_experts, per_expert_prefixes=names, prefix=prefix)

    experts_attr: str = "experts"


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



#: how the engine installs its recording expert dispatch (raptor.per_sample.experts.DISPATCH):
#: "fused" = 3-D expert weights behind transformers' ExpertsInterface; "module_dict" = one module
#: per expert called by the block, with a top-1 router whose output gives the owners.
DISPATCHES: tuple[str, ...] = ("fused", "module_dict")


@dataclass(frozen=True)
class MoEAdapter:
    """Everything raptor needs to know about one MoE family (one record per family)."""

    model_type: str
    block_class: str  # class name of the sparse MoE block
    router_attr: str
    experts_attr: str
    head_class: str | None = None  # "module:Class" of the sequence-classification class (None: no classifier)
    tiny_kwargs: Callable[[TinySize], dict] | None = None  # config fields of a tiny random model (coupling off)
    causal_class: str | None = None  # "module:Class" of the causal LM for --objective generate
    shared_attrs: tuple[str, ...] = ()
    top1: bool = False
    top_k_attr: str = "num_experts_per_tok"  # config field holding k (unused when top1)
    dispatch: str = "fused"
    bias_table_attr: str | None = None       # trainable relative-attention bias tables (T5-style)
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    zero_config_fields: tuple[str, ...] = ("router_aux_loss_coef",)
    false_config_fields: tuple[str, ...] = ("output_router_logits",)
    jitter_attrs: tuple[str, ...] = ()
    frozen_buffers: tuple[str, ...] = ()
    frozen_prefixes: tuple[str, ...] = ()  # parameters frozen in every method, in no clipping group
    notes: str = ""
    extra: dict = field(default_factory=dict)
    # public pre-training (raptor.pretrain): "mlm" (an encoder: masked tokens) or "causal" (next token),
    # and config fields of the pre-training size that differ from the tiny fine-tuning one
    pretrain_objective: str = "causal"
    pretrain_overrides: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.dispatch not in DISPATCHES:
            raise ConfigError(f"MoEAdapter {self.model_type}: dispatch must be one of {DISPATCHES}, "
                              f"got {self.dispatch!r}")
        if self.dispatch == "module_dict" and not self.top1:
            raise ConfigError(f"MoEAdapter {self.model_type}: the module_dict dispatch reads owners from a top-1 router")
        if self.pretrain_objective not in ("mlm", "causal"):
            raise ConfigError(f"MoEAdapter {self.model_type}: pretrain_objective must be 'mlm' or 'causal', "
                              f"got {self.pretrain_objective!r}")

    # ---------------------------------------------------------------- the family's classes and configs
    def classification_class(self):
        """The sequence-classification class raptor uses for this family (imported on demand)."""
        if self.head_class is None:
            raise UnsupportedModelError(f"{self.model_type} has no classification head in raptor; use "
                                        "--objective generate")
        module, _, name = self.head_class.partition(":")
        return getattr(importlib.import_module(module), name)

    def causal_lm_class(self):
        """The causal LM class of this family (``--objective generate``), imported on demand."""
        if self.causal_class is None:
            raise UnsupportedModelError(f"{self.model_type} has no causal LM for --objective generate")
        module, _, name = self.causal_class.partition(":")
        return getattr(importlib.import_module(module), name)

    def tiny_config_kwargs(self, size: TinySize) -> dict:
        return self.tiny_kwargs(size)

    # ---------------------------------------------------------------- structure
    def top_k(self, config) -> int:
        if self.top1:
            return 1
        value = getattr(config, self.top_k_attr, None)
        if not isinstance(value, int):
            raise UnsupportedModelError(f"{self.model_type}: config.{self.top_k_attr} (top-k) is {value!r}")
        return value

    def moe_layers(self, model: nn.Module) -> list[MoELayerInfo]:
        """The model's MoE layers, ordered by block index."""
        top_k = self.top_k(model.config)
        fused = self.dispatch == "fused"
        out = []
        for name, module in model.named_modules():
            if type(module).__name__ != self.block_class:
                continue
            match = _LAYER_RE.search(name + ".")
            if match is None:
                raise UnsupportedModelError(f"cannot read the block index of MoE module {name!r}")
            experts = getattr(module, self.experts_attr)
            num_experts = int(experts.num_experts) if fused else len(list(experts.children()))
            shared = tuple(getattr(module, a) for a in self.shared_attrs if getattr(module, a, None) is not None)
            out.append(
                MoELayerInfo(
                    index=int(match.group(1)), name=name, num_experts=num_experts, top_k=top_k,
                    router=getattr(module, self.router_attr), experts=experts, shared_experts=shared,
                    fused=fused, dispatch=self.dispatch, experts_attr=self.experts_attr,
                )
            )
        if not out:
            raise UnsupportedModelError(f"no {self.block_class} modules found in the {self.model_type} model")
        out.sort(key=lambda info: info.index)
        return out

    def expert_params(self, model: nn.Module) -> list[ExpertParams]:
        return [info.expert_params() for info in self.moe_layers(model)]

    # ---------------------------------------------------------------- policies
    def prepare(self, model: nn.Module) -> dict[str, object]:
        """Switch off everything that couples records or draws hidden randomness (idempotent).

        Returns what was set, for logs. Raises if a frozen buffer turned out to be trainable.
        """
        changed: dict[str, object] = {}
        configs = _configs(model)
        for cfg in configs:
            for f in self.zero_config_fields + ("router_jitter_noise", "router_z_loss_coef"):
                if getattr(cfg, f, None) not in (None, 0, 0.0):
                    changed[f] = getattr(cfg, f)
                    setattr(cfg, f, 0.0)
            for f in self.false_config_fields:
                if getattr(cfg, f, False):
                    changed[f] = True
                    setattr(cfg, f, False)
            for f in ("attention_dropout", "dropout_rate", "hidden_dropout", "hidden_dropout_prob"):
                if getattr(cfg, f, None) not in (None, 0, 0.0):
                    changed[f] = getattr(cfg, f)
                    setattr(cfg, f, 0.0)
        for mod_name, module in model.named_modules():
            if isinstance(module, nn.Dropout) and module.p != 0.0:
                changed[f"{mod_name}.p"] = module.p
                module.p = 0.0
            if isinstance(getattr(module, "attention_dropout", None), float) and module.attention_dropout != 0.0:
                changed[f"{mod_name}.attention_dropout"] = module.attention_dropout
                module.attention_dropout = 0.0
            for attr in ("jitter_noise",) + self.jitter_attrs:
                value = getattr(module, attr, None)
                if isinstance(value, float) and value != 0.0:
                    changed[f"{mod_name}.{attr}"] = value
                    setattr(module, attr, 0.0)
        for name, param in model.named_parameters():
            if self.frozen_prefixes and _under_any(name, self.frozen_prefixes) and param.requires_grad:
                raise UnsupportedModelError(
                    f"{name} must stay frozen in {self.model_type} (it belongs to no clipping group); "
                    "call requires_grad_(False) on it"
                )
            if name.rsplit(".", 1)[-1] in self.frozen_buffers and param.requires_grad:
                raise UnsupportedModelError(
                    f"{name} is updated from data in {self.model_type} and must stay a frozen buffer; "
                    "it is a trainable parameter here: call requires_grad_(False) on it"
                )
        return changed

    def aux_policy(self, model: nn.Module) -> dict[str, object]:
        """The aux-loss / jitter settings that are actually in force (for tests and reports)."""
        out: dict[str, object] = {}
        for cfg in _configs(model):
            for f in self.zero_config_fields + ("router_jitter_noise", "router_z_loss_coef") + self.false_config_fields:
                if hasattr(cfg, f):
                    out[f] = getattr(cfg, f)
        return out


def _under_any(name: str, prefixes: tuple[str, ...]) -> bool:
    """``name`` is one of ``prefixes`` or lies under one (``prefix.`` or a prefix ending in ``.``)."""
    return any(name == p or name.startswith(p if p.endswith(".") else p + ".") for p in prefixes)


def _configs(model: nn.Module) -> list:
    seen: dict[int, object] = {}
    for module in model.modules():
        cfg = getattr(module, "config", None)
        if cfg is not None and hasattr(cfg, "to_dict"):
            seen.setdefault(id(cfg), cfg)
    return list(seen.values())


_REGISTRY: dict[str, MoEAdapter] = {}


def register_adapter(adapter: MoEAdapter) -> MoEAdapter:
    """Add ``adapter`` to the registry (keyed on its ``model_type``)."""
    _REGISTRY[adapter.model_type] = adapter
    return adapter


def supported_model_types() -> tuple[str, ...]:
    """The registered families, in registration order."""
    return tuple(_REGISTRY)


def get_adapter(model_or_type: nn.Module | str) -> MoEAdapter:
    """The adapter for a model (keyed on ``config.model_type``) or for a model-type string."""
    model_type = model_or_type if isinstance(model_or_type, str) else getattr(
        getattr(model_or_type, "config", None), "model_type", None)
    if model_type not in _REGISTRY:
        raise UnsupportedModelError(
            f"no MoE adapter for model_type {model_type!r}; supported: {', '.join(supported_model_types())}"
        )
    return _REGISTRY[model_type]


def _register_all(adapters: Iterable[MoEAdapter]) -> None:
    for a in adapters:
        register_adapter(a)


def _decoder(s: TinySize) -> dict:
    """Config fields every decoder family's tiny model shares (aux loss off, no router logits, no dropout)."""
    return dict(vocab_size=s.vocab_size, hidden_size=s.hidden_size, num_hidden_layers=s.num_layers,
                num_attention_heads=s.num_heads, num_key_value_heads=s.num_heads, intermediate_size=2 * s.hidden_size,
                max_position_embeddings=s.max_positions, num_experts_per_tok=s.top_k, output_router_logits=False,
                router_aux_loss_coef=0.0, pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
                attention_dropout=0.0)


def _head_dim(s: TinySize) -> int:
    return s.hidden_size // s.num_heads


def _switch(s: TinySize) -> dict:
    return dict(vocab_size=s.vocab_size, d_model=s.hidden_size, d_kv=_head_dim(s), d_ff=s.expert_intermediate,
                num_heads=s.num_heads, num_layers=s.num_layers, num_decoder_layers=s.num_layers,
                num_sparse_encoder_layers=s.num_layers, num_sparse_decoder_layers=s.num_layers,
                encoder_sparse_step=1, decoder_sparse_step=1, num_experts=s.num_experts,
                expert_capacity=s.max_positions, router_jitter_noise=0.0, router_z_loss_coef=0.0,
                router_aux_loss_coef=0.0, dropout_rate=0.0, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
                relative_attention_num_buckets=8, relative_attention_max_distance=32)


def _deepseek(s: TinySize, **extra) -> dict:
    h = _head_dim(s)
    return dict(_decoder(s), n_routed_experts=s.num_experts, n_shared_experts=1,
                moe_intermediate_size=s.expert_intermediate, first_k_dense_replace=0, kv_lora_rank=16,
                q_lora_rank=None, qk_rope_head_dim=h // 2 or 1, qk_nope_head_dim=h, v_head_dim=h,
                head_dim=h // 2 or 1, routed_scaling_factor=1.0, n_group=1, topk_group=1, norm_topk_prob=False,
                **extra)


def _bert_moe(s: TinySize) -> dict:
    return dict(vocab_size=s.vocab_size, hidden_size=s.hidden_size, num_hidden_layers=s.num_layers,
                num_attention_heads=s.num_heads, intermediate_size=s.expert_intermediate,
                max_position_embeddings=s.max_positions, num_experts=s.num_experts, pad_token_id=0)


_HF = "transformers:"
_register_all([
    MoEAdapter(
        "switch_transformers", "SwitchTransformersSparseMLP", router_attr="router", experts_attr="experts",
        head_class="raptor.moe.heads:SwitchForSequenceClassification", tiny_kwargs=_switch,
        top1=True, dispatch="module_dict", bias_table_attr="relative_attention_bias", pretrain_objective="mlm",
        pretrain_overrides=dict(relative_attention_num_buckets=32, relative_attention_max_distance=128),
        zero_config_fields=("router_aux_loss_coef", "router_z_loss_coef"), lora_targets=("q", "k", "v", "o", "wi", "wo"),
        notes="top-1 router; capacity counted per sequence; aux and z losses off",
    ),
    MoEAdapter("olmoe", "OlmoeSparseMoeBlock", router_attr="gate", experts_attr="experts",
               causal_class=_HF + "OlmoeForCausalLM", head_class="raptor.moe.heads:OlmoeForSequenceClassification",
               tiny_kwargs=lambda s: dict(_decoder(s), num_experts=s.num_experts,
                                          intermediate_size=s.expert_intermediate, norm_topk_prob=False),
               notes="batch-wide load-balancing loss off"),
    MoEAdapter("mixtral", "MixtralSparseMoeBlock", router_attr="gate", experts_attr="experts",
               causal_class=_HF + "MixtralForCausalLM", head_class=_HF + "MixtralForSequenceClassification",
               tiny_kwargs=lambda s: dict(_decoder(s), num_local_experts=s.num_experts, head_dim=_head_dim(s),
                                          intermediate_size=s.expert_intermediate, router_jitter_noise=0.0),
               notes="batch-wide load-balancing loss off; jitter off"),
    MoEAdapter("qwen2_moe", "Qwen2MoeSparseMoeBlock", router_attr="gate", experts_attr="experts",
               causal_class=_HF + "Qwen2MoeForCausalLM", head_class=_HF + "Qwen2MoeForSequenceClassification",
               tiny_kwargs=lambda s: dict(_decoder(s), num_experts=s.num_experts,
                                          moe_intermediate_size=s.expert_intermediate,
                                          shared_expert_intermediate_size=s.expert_intermediate, decoder_sparse_step=1,
                                          norm_topk_prob=False, max_window_layers=s.num_layers, layer_types=None),
               shared_attrs=("shared_expert", "shared_expert_gate"),
               notes="shared expert and its gate are in the shared group"),
    MoEAdapter("qwen3_moe", "Qwen3MoeSparseMoeBlock", router_attr="gate", experts_attr="experts",
               causal_class=_HF + "Qwen3MoeForCausalLM", head_class=_HF + "Qwen3MoeForSequenceClassification",
               tiny_kwargs=lambda s: dict(_decoder(s), num_experts=s.num_experts,
                                          moe_intermediate_size=s.expert_intermediate, decoder_sparse_step=1,
                                          norm_topk_prob=True, head_dim=_head_dim(s), layer_types=None)),
    MoEAdapter("deepseek_v2", "DeepseekV2Moe", router_attr="gate", experts_attr="experts",
               causal_class=_HF + "DeepseekV2ForCausalLM", head_class=_HF + "DeepseekV2ForSequenceClassification",
               tiny_kwargs=lambda s: _deepseek(s, topk_method="greedy"), lora_targets=("q_proj", "o_proj"),
               shared_attrs=("shared_experts",), notes="shared experts are in the shared group"),
    MoEAdapter("deepseek_v3", "DeepseekV3MoE", router_attr="gate", experts_attr="experts",
               causal_class=_HF + "DeepseekV3ForCausalLM", head_class=_HF + "DeepseekV3ForSequenceClassification",
               tiny_kwargs=lambda s: _deepseek(s, num_nextn_predict_layers=0, rope_interleave=False),
               lora_targets=("q_proj", "o_proj"),
               shared_attrs=("shared_experts",), frozen_buffers=("e_score_correction_bias",),
               notes="e_score_correction_bias is a frozen buffer (never updated from data)"),
    MoEAdapter(
        "bert_moe", "BertMoeSparseBlock", router_attr="router", experts_attr="experts",
        head_class="raptor.moe.bert_moe:BertMoeForSequenceClassification", tiny_kwargs=_bert_moe,
        top1=True, dispatch="module_dict", pretrain_objective="mlm",
        lora_targets=("q_proj", "k_proj", "v_proj", "o_proj", "wi", "wo"),
        notes="BERT encoder upcycled into top-1 MoE FFNs (raptor.pretrain.upcycle); no aux loss, no capacity",
    ),
    MoEAdapter("deepseek_vl_v2", "DeepseekV2Moe", router_attr="gate", experts_attr="experts",
               causal_class="raptor.moe.vl2.model:DeepseekVL2ForCausalLM",
               shared_attrs=("shared_experts",), frozen_prefixes=("vision.", "projector.", "image_newline",
                                                                  "view_seperator"),
               notes="DeepSeek-VL2 (raptor.moe.vl2): vision tower, projector and tile tags frozen (neither "
                     "role); shared experts in the shared group; each record's image is encoded alone"),
])


def freeze_untrained_experts(model: nn.Module, trained_layers: Iterable[int]) -> None:
    """``requires_grad_(False)`` on the expert parameters of MoE layers outside ``trained_layers``
    (any family: the layers come from the model's adapter)."""
    trained = set(trained_layers)
    for info in get_adapter(model).moe_layers(model):
        if info.index not in trained:
            info.experts.requires_grad_(False)
