"""DeepSeek-VL2's ``config.json`` schema, read without the release's remote code.

The release (``deepseek-ai/DeepSeek-VL2``, ``deepseek_vl2/models/modeling_deepseek_vl_v2.py``:
``DeepseekVLV2Config``, ``VisionEncoderConfig``, ``MlpProjectorConfig``; ``configuration_deepseek.py``:
``DeepseekV2Config``) stores a top-level config with ``model_type = "deepseek_vl_v2"`` and:

* ``vision_config``: ``model_name``, ``image_size`` (384), ``patch_size``, ``width``, ``layers``,
  ``heads``, ``mlp_ratio``, ``global_pool`` ("map"), ``ignore_head`` (true), ``class_token`` (false);
* ``projector_config``: ``projector_type`` ("downsample_mlp_gelu"), ``input_dim`` (1152), ``n_embed``,
  ``depth`` (2), ``mlp_ratio`` (1), ``downsample_ratio`` (2), ``token_pooling``;
* ``language_config``: a DeepSeek-V2 config (``vocab_size``, ``hidden_size``, ``intermediate_size``,
  ``moe_intermediate_size``, ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``,
  ``n_routed_experts``, ``n_shared_experts``, ``num_experts_per_tok``, ``first_k_dense_replace``,
  ``moe_layer_freq``, ``topk_method``, ``n_group``, ``topk_group``, ``routed_scaling_factor``,
  ``scoring_func``, ``norm_topk_prob``, ``use_mla``, ``rope_theta``, ``rms_norm_eps``, ...);
* ``tile_tag`` ("2D"), ``global_view_pos`` ("head"), ``candidate_resolutions``.

The defaults below are the release's class defaults, so a partial ``config.json`` (VL2-Tiny's
lists only the fields that differ) reads the same as with the release code.

Supported here: ``tile_tag = "2D"`` (the release's only live path), multi-head attention
(``use_mla = false``, as in VL2-Tiny), softmax gating with ``greedy`` or ``group_limited_greedy``
top-k and unnormalised top-k weights. Anything else raises :class:`UnsupportedModelError`
naming the field.

Privacy: nothing here reads data.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from raptor.errors import UnsupportedModelError

MODEL_TYPE = "deepseek_vl_v2"


@dataclass(frozen=True)
class VisionSpec:
    """``vision_config`` (release defaults: SigLIP-L/16 at 384)."""

    model_name: str = "siglip_large_patch16_384"
    image_size: int = 384
    patch_size: int = 16
    width: int = 1024
    layers: int = 24
    heads: int = 16
    mlp_ratio: float = 4
    global_pool: str = "map"
    ignore_head: bool = True
    class_token: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def mlp_hidden(self) -> int:
        return int(self.width * self.mlp_ratio)  # timm's Mlp: int(dim * mlp_ratio)

    @property
    def grid(self) -> int:
        return self.image_size // self.patch_size


@dataclass(frozen=True)
class ProjectorSpec:
    """``projector_config``."""

    projector_type: str = "downsample_mlp_gelu"
    input_dim: int = 1152
    n_embed: int = 2048
    depth: int = 2
    mlp_ratio: int = 1
    downsample_ratio: int = 2
    token_pooling: bool = False
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class LanguageSpec:
    """``language_config`` (release ``DeepseekV2Config`` defaults)."""

    vocab_size: int = 102400
    hidden_size: int = 4096
    intermediate_size: int = 11008
    moe_intermediate_size: int = 1407
    num_hidden_layers: int = 30
    num_attention_heads: int = 32
    num_key_value_heads: int = 32
    n_shared_experts: int | None = None
    n_routed_experts: int | None = None
    routed_scaling_factor: float = 1.0
    topk_method: str = "gready"
    n_group: int | None = None
    topk_group: int | None = None
    num_experts_per_tok: int | None = None
    moe_layer_freq: int = 1
    first_k_dense_replace: int = 0
    norm_topk_prob: bool = False
    scoring_func: str = "softmax"
    hidden_act: str = "silu"
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    pad_token_id: int | None = None
    bos_token_id: int = 100000
    eos_token_id: int = 100001
    tie_word_embeddings: bool = False
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    attention_bias: bool = False
    use_mla: bool = True
    extra: dict = field(default_factory=dict)

    def is_moe_layer(self, i: int) -> bool:
        """The release's rule (``DeepseekV2DecoderLayer``)."""
        return (self.n_routed_experts is not None and i >= self.first_k_dense_replace
                and i % self.moe_layer_freq == 0)


def _spec(cls, data: dict):
    known = {f for f in cls.__dataclass_fields__ if f != "extra"}
    return cls(**{k: v for k, v in data.items() if k in known},
               extra={k: v for k, v in data.items() if k not in known})


@dataclass(frozen=True)
class Vl2Config:
    """The whole release config; ``to_dict`` writes the release's ``config.json`` layout back."""

    vision: VisionSpec
    projector: ProjectorSpec
    language: LanguageSpec
    tile_tag: str = "2D"
    global_view_pos: str = "head"
    candidate_resolutions: tuple = ((384, 384),)
    extra: dict = field(default_factory=dict)
    model_type: str = MODEL_TYPE

    def __post_init__(self) -> None:
        lang, proj = self.language, self.projector
        problems = []
        if self.tile_tag != "2D":
            problems.append(f"tile_tag={self.tile_tag!r} (only '2D', the release's live path)")
        if self.global_view_pos not in ("head", "tail"):
            problems.append(f"global_view_pos={self.global_view_pos!r} (expected 'head' or 'tail')")
        if lang.use_mla:
            problems.append("language_config.use_mla=true (multi-latent attention; VL2-Tiny uses false)")
        if lang.n_routed_experts is None or lang.num_experts_per_tok is None:
            problems.append("language_config.n_routed_experts / num_experts_per_tok missing (a dense model)")
        if lang.scoring_func != "softmax":
            problems.append(f"language_config.scoring_func={lang.scoring_func!r} (only 'softmax')")
        if lang.topk_method not in ("greedy", "group_limited_greedy"):
            problems.append(f"language_config.topk_method={lang.topk_method!r} (greedy or group_limited_greedy)")
        if lang.norm_topk_prob and (lang.num_experts_per_tok or 1) > 1:
            problems.append("language_config.norm_topk_prob=true (unnormalised top-k weights only)")
        if lang.rope_scaling is not None:
            problems.append("language_config.rope_scaling is set (plain RoPE only)")
        if lang.n_shared_experts is None:
            problems.append("language_config.n_shared_experts is null (the MoE block needs shared experts)")
        if proj.token_pooling:
            problems.append("projector_config.token_pooling=true")
        if proj.projector_type not in ("identity", "linear", "mlp_gelu", "downsample_mlp_gelu"):
            problems.append(f"projector_config.projector_type={proj.projector_type!r}")
        if self.vision.class_token:
            problems.append("vision_config.class_token=true")
        if problems:
            raise UnsupportedModelError("DeepSeek-VL2 config not supported by raptor: " + "; ".join(problems))

    # ---------------------------------------------------------------- what the adapter reads
    @property
    def num_experts_per_tok(self) -> int:
        return int(self.language.num_experts_per_tok)

    @property
    def vocab_size(self) -> int:
        return self.language.vocab_size

    @property
    def pad_token_id(self) -> int | None:
        return self.language.pad_token_id

    @property
    def tokens_per_side(self) -> int:
        """h = w of one view after the projector (``ceil(grid / downsample_ratio)`` when downsampling)."""
        g = self.vision.grid
        if self.projector.projector_type == "downsample_mlp_gelu":
            r = self.projector.downsample_ratio
            return -(-g // r)
        return g

    @classmethod
    def from_dict(cls, data: dict) -> Vl2Config:
        if data.get("model_type") != MODEL_TYPE:
            raise UnsupportedModelError(f"expected model_type {MODEL_TYPE!r}, got {data.get('model_type')!r}")
        top = {"tile_tag", "global_view_pos", "candidate_resolutions", "vision_config", "projector_config",
               "language_config", "model_type"}
        return cls(
            vision=_spec(VisionSpec, data.get("vision_config", {})),
            projector=_spec(ProjectorSpec, data.get("projector_config", {})),
            language=_spec(LanguageSpec, data.get("language_config", {})),
            tile_tag=data.get("tile_tag", "tile_tag"),  # the release's __init__ default (then rejected)
            global_view_pos=data.get("global_view_pos", "head"),
            candidate_resolutions=tuple(tuple(r) for r in data.get("candidate_resolutions", ((384, 384),))),
            extra={k: v for k, v in data.items() if k not in top},
        )

    def to_dict(self) -> dict:
        def flat(spec, model_type):
            d = {k: v for k, v in asdict(spec).items() if k != "extra"}
            d.update(spec.extra)
            d.setdefault("model_type", model_type)
            return d

        out = dict(self.extra)
        out.update(
            model_type=MODEL_TYPE, tile_tag=self.tile_tag, global_view_pos=self.global_view_pos,
            candidate_resolutions=[list(r) for r in self.candidate_resolutions],
            vision_config=flat(self.vision, "vision"), projector_config=flat(self.projector, "mlp_projector"),
            language_config=flat(self.language, "deepseek_v2"),
        )
        return out
