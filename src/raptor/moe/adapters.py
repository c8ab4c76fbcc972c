"""Adapters: one small description per Hugging Face MoE family, in a registry keyed on ``model_type``.

An adapter tells the per-record engine (and everything else in raptor) where each MoE layer's
router, experts and shared experts live, how tokens are routed (top-1 or top-k) and which
batch-coupling features must be switched off. Adding a family is one :class:`MoEAdapter` entry.

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

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from torch import nn

from raptor.errors import UnsupportedModelError
from raptor.roles.groups import ExpertParams

_LAYER_RE = re.compile(r"(?:^|\.)(?:layers|block|h)\.(\d+)\.")


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

    def expert_params(self) -> ExpertParams:
        prefix = f"{self.name}.{self.experts_attr}"
        if self.fused:
            fused = tuple(f"{prefix}.{n}" for n, p in self.experts.named_parameters(recurse=False) if p.ndim == 3)
            return ExpertParams(self.index, self.num_experts, fused=fused, prefix=prefix)
        names = tuple(f"{prefix}.{n}" for n, _ in self.experts.named_children())
        return ExpertParams(self.index, self.num_experts, per_expert_prefixes=names, prefix=prefix)

    experts_attr: str = "experts"


@dataclass(frozen=True)
class MoEAdapter:
    """What raptor needs to know about one MoE family."""

    model_type: str
    block_class: str  # class name of the sparse MoE block
    router_attr: str
    experts_attr: str
    shared_attrs: tuple[str, ...] = ()
    top1: bool = False
    zero_config_fields: tuple[str, ...] = ("router_aux_loss_coef",)
    false_config_fields: tuple[str, ...] = ("output_router_logits",)
    jitter_attrs: tuple[str, ...] = ()
    frozen_buffers: tuple[str, ...] = ()
    frozen_prefixes: tuple[str, ...] = ()  # parameters frozen in every method, in no clipping group
    notes: str = ""
    extra: dict = field(default_factory=dict)

    # ---------------------------------------------------------------- structure
    def moe_layers(self, model: nn.Module) -> list[MoELayerInfo]:
        """The model's MoE layers, ordered by block index."""
        top_k = _config_top_k(model.config, self.top1)
        out = []
        for name, module in model.named_modules():
            if type(module).__name__ != self.block_class:
                continue
            match = _LAYER_RE.search(name + ".")
            if match is None:
                raise UnsupportedModelError(f"cannot read the block index of MoE module {name!r}")
            experts = getattr(module, self.experts_attr)
            fused = not isinstance(experts, (nn.ModuleList, nn.ModuleDict))
            num_experts = int(getattr(experts, "num_experts", 0) or len(list(experts.children())))
            shared = tuple(getattr(module, a) for a in self.shared_attrs if getattr(module, a, None) is not None)
            out.append(
                MoELayerInfo(
                    index=int(match.group(1)), name=name, num_experts=num_experts, top_k=top_k,
                    router=getattr(module, self.router_attr), experts=experts, shared_experts=shared,
                    fused=fused, experts_attr=self.experts_attr,
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


def _config_top_k(config, top1: bool) -> int:
    if top1:
        return 1
    for f in ("num_experts_per_tok", "top_k", "moe_topk"):
        value = getattr(config, f, None)
        if isinstance(value, int):
            return value
    raise UnsupportedModelError(f"{config.model_type}: cannot find top-k in the config")


_REGISTRY: dict[str, MoEAdapter] = {}


def register_adapter(adapter: MoEAdapter) -> MoEAdapter:
    """Add ``adapter`` to the registry (keyed on its ``model_type``)."""
    _REGISTRY[adapter.model_type] = adapter
    return adapter


def supported_model_types() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


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


_register_all([
    MoEAdapter(
        "switch_transformers", "SwitchTransformersSparseMLP", router_attr="router", experts_attr="experts",
        top1=True, zero_config_fields=("router_aux_loss_coef", "router_z_loss_coef"),
        false_config_fields=("output_router_logits",),
        notes="top-1 router; capacity counted per sequence; aux and z losses off",
    ),
    MoEAdapter("olmoe", "OlmoeSparseMoeBlock", router_attr="gate", experts_attr="experts",
               notes="batch-wide load-balancing loss off"),
    MoEAdapter("mixtral", "MixtralSparseMoeBlock", router_attr="gate", experts_attr="experts",
               notes="batch-wide load-balancing loss off; jitter off"),
    MoEAdapter("qwen2_moe", "Qwen2MoeSparseMoeBlock", router_attr="gate", experts_attr="experts",
               shared_attrs=("shared_expert", "shared_expert_gate"),
               notes="shared expert and its gate are in the shared group"),
    MoEAdapter("qwen3_moe", "Qwen3MoeSparseMoeBlock", router_attr="gate", experts_attr="experts"),
    MoEAdapter("deepseek_v2", "DeepseekV2Moe", router_attr="gate", experts_attr="experts",
               shared_attrs=("shared_experts",), notes="shared experts are in the shared group"),
    MoEAdapter("deepseek_v3", "DeepseekV3MoE", router_attr="gate", experts_attr="experts",
               shared_attrs=("shared_experts",), frozen_buffers=("e_score_correction_bias",),
               notes="e_score_correction_bias is a frozen buffer (never updated from data)"),
    MoEAdapter("deepseek_vl_v2", "DeepseekV2Moe", router_attr="gate", experts_attr="experts",
               shared_attrs=("shared_experts",), frozen_prefixes=("vision.", "projector.", "image_newline",
                                                                  "view_seperator"),
               notes="DeepSeek-VL2 (raptor.moe.vl2): vision tower, projector and tile tags frozen (neither "
                     "role); shared experts in the shared group; each record's image is encoded alone"),
])
