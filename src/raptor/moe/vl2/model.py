"""DeepSeek-VL2 as raptor runs it: SigLIP tower, MLP projector, 2-D tile tags, DeepSeekMoE decoder.

Module names follow the release's safetensors keys (see :mod:`raptor.moe.vl2.release_files`), so
that a checkpoint loads by name except for the vision tower, which is ``transformers``'
:class:`~transformers.SiglipVisionModel` under a documented name mapping:

* ``vision``: frozen SigLIP ViT (no class token, post-norm output, the release's ``ignore_head``:
  the MAP pooling head is not used);
* ``projector``: frozen ``MlpProjector`` (``downsample_mlp_gelu``: 2x2 neighbourhoods unfolded
  channel-major, then Linear-GELU-Linear as ``projector.layers.{0,2}``);
* ``image_newline`` / ``view_seperator`` (sic): frozen embeddings of the 2-D tile tags;
* ``language``: the DeepSeek-V2 decoder, ``language.model.{embed_tokens,layers,norm}`` and
  ``language.lm_head``. Attention is multi-head (``use_mla = false``, as in VL2-Tiny):
  ``transformers``' ``LlamaAttention`` (``q_proj/k_proj/v_proj/o_proj``, RoPE over the whole head).
  Feed-forward: ``DeepseekV2MLP`` for dense layers (``first_k_dense_replace``, ``moe_layer_freq``),
  and ``transformers``' ``DeepseekV2Moe`` for MoE layers: a softmax top-k router ``mlp.gate``,
  the routed experts as fused 3-D weights ``mlp.experts.{gate_up_proj,down_proj}`` (the release
  stores one module per expert; the loader stacks them) and the always-on ``mlp.shared_experts``.

Image tokens (release ``DeepseekVLV2ForCausalLM.prepare_inputs_embeds``, ``tile_tag = "2D"``):
one view gives h x w projected tokens; each row of h is followed by ``image_newline`` (h (w + 1)
tokens); the global view and the local tiles are joined by ``view_seperator``, the global view
first when ``global_view_pos = "head"``. raptor implements the release's single-tile layout (its
``cropping=False`` path): the image is padded to a square of ``image_size`` with the mean colour,
and that one tile is both the global view and the only local tile, so the sequence is
``[global h(w+1)] [view_seperator] [local h(w+1)]`` = 2 h (w + 1) + 1 image tokens. The release's
dynamic tiling (``select_best_resolution`` over ``candidate_resolutions``, several local tiles)
is not implemented. The embeddings at the positions of ``images_seq_mask`` are replaced by these
features (the release's ``masked_scatter_``).

Privacy: each record's image is encoded ALONE (a loop over records, one image per forward of the
tower), under ``torch.no_grad`` and with frozen weights, so image features cannot mix across
records (the tower has LayerNorm only, no batch statistics, but the loop makes it evident). The
vision tower, projector and tile tags are in no clipping group and receive no update.

Pixels travel as ``uint8`` [B, 3, S, S] (4x smaller than floats) and are normalised here with the
release's mean = std = 0.5.

Legend: B records, T tokens, D language hidden size, W vision width, P patches, S image side.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DeepseekV2Config, LlamaConfig, SiglipVisionConfig, SiglipVisionModel
from transformers.masking_utils import create_causal_mask
from transformers.modeling_outputs import CausalLMOutput
from transformers.models.deepseek_v2.modeling_deepseek_v2 import (
    DeepseekV2MLP,
    DeepseekV2Moe,
    DeepseekV2RMSNorm,
)
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

from raptor.errors import DataError
from raptor.moe.vl2.config import LanguageSpec, ProjectorSpec, VisionSpec, Vl2Config

IMAGE_MEAN = 0.5
IMAGE_STD = 0.5


def siglip_config(spec: VisionSpec) -> SiglipVisionConfig:
    """The transformers SigLIP config equal to the release's timm-style ``VisionTransformer``:
    GELU(tanh), LayerNorm eps 1e-6, MLP hidden ``int(width * mlp_ratio)``, no pooling head."""
    cfg = SiglipVisionConfig(hidden_size=spec.width, intermediate_size=spec.mlp_hidden,
                             num_hidden_layers=spec.layers, num_attention_heads=spec.heads,
                             image_size=spec.image_size, patch_size=spec.patch_size, hidden_act="gelu_pytorch_tanh",
                             layer_norm_eps=1e-6, attention_dropout=0.0, vision_use_head=False)
    cfg._attn_implementation = "sdpa"
    return cfg


def moe_config(lang: LanguageSpec) -> DeepseekV2Config:
    """A transformers DeepSeek-V2 config carrying what ``DeepseekV2Moe``/``DeepseekV2MLP`` read."""
    cfg = DeepseekV2Config(
        vocab_size=lang.vocab_size, hidden_size=lang.hidden_size, intermediate_size=lang.intermediate_size,
        moe_intermediate_size=lang.moe_intermediate_size, num_hidden_layers=lang.num_hidden_layers,
        num_attention_heads=lang.num_attention_heads, num_key_value_heads=lang.num_key_value_heads,
        n_routed_experts=lang.n_routed_experts, n_shared_experts=lang.n_shared_experts,
        num_experts_per_tok=lang.num_experts_per_tok, routed_scaling_factor=lang.routed_scaling_factor,
        topk_method=lang.topk_method, n_group=lang.n_group or 1, topk_group=lang.topk_group or 1,
        first_k_dense_replace=lang.first_k_dense_replace, hidden_act=lang.hidden_act, rms_norm_eps=lang.rms_norm_eps,
        mlp_bias=False, pad_token_id=lang.pad_token_id, tie_word_embeddings=False,
    )
    cfg._experts_implementation = "eager"  # the library's per-expert loop; the engine selects its own per call
    cfg.router_aux_loss_coef = 0.0  # the release's aux_loss_alpha applies in training mode only; never used here
    return cfg


def attention_config(lang: LanguageSpec) -> LlamaConfig:
    cfg = LlamaConfig(
        vocab_size=lang.vocab_size, hidden_size=lang.hidden_size, intermediate_size=lang.intermediate_size,
        num_hidden_layers=lang.num_hidden_layers, num_attention_heads=lang.num_attention_heads,
        num_key_value_heads=lang.num_key_value_heads, max_position_embeddings=lang.max_position_embeddings,
        rms_norm_eps=lang.rms_norm_eps, attention_bias=lang.attention_bias, attention_dropout=0.0,
        rope_parameters={"rope_type": "default", "rope_theta": lang.rope_theta}, pad_token_id=lang.pad_token_id,
        tie_word_embeddings=False,
    )
    cfg._attn_implementation = "sdpa"
    return cfg


class MlpProjector(nn.Module):
    """The release's ``MlpProjector`` (``layers`` is an ``nn.Sequential``, keys ``projector.layers.N.*``)."""

    def __init__(self, spec: ProjectorSpec):
        super().__init__()
        self.spec = spec
        t = spec.projector_type
        if t == "identity":
            self.layers = nn.Identity()
        elif t == "linear":
            self.layers = nn.Linear(spec.input_dim, spec.n_embed)
        elif t == "mlp_gelu":
            mods = [nn.Linear(spec.input_dim, spec.n_embed)]
            for _ in range(1, spec.depth):
                mods += [nn.GELU(), nn.Linear(spec.n_embed, spec.n_embed)]
            self.layers = nn.Sequential(*mods)
        else:  # downsample_mlp_gelu
            r, m = spec.downsample_ratio, spec.mlp_ratio
            mods = [nn.Linear(spec.input_dim * r * r, spec.n_embed * m)]
            for _ in range(1, spec.depth - 1):
                mods += [nn.GELU(), nn.Linear(spec.n_embed * m, spec.n_embed * m)]
            mods += [nn.GELU(), nn.Linear(spec.n_embed * m, spec.n_embed)]
            self.layers = nn.Sequential(*mods)

    def forward(self, x_NPW: torch.Tensor) -> torch.Tensor:
        if self.spec.projector_type == "downsample_mlp_gelu":
            n, p, w = x_NPW.shape
            side = int(round(p ** 0.5))
            r = self.spec.downsample_ratio
            pad = (r - side % r) % r
            grid = x_NPW.reshape(n, side, side, w)
            if pad:
                grid = F.pad(grid, (0, 0, 0, pad, 0, pad))  # zero rows/columns at the bottom/right
            # [n, W, H, W'] -> unfold r x r blocks: [n, W*r*r, (H/r)(W'/r)], channel-major as the release
            x_NPW = F.unfold(grid.permute(0, 3, 1, 2), kernel_size=r, stride=r).permute(0, 2, 1)
        return self.layers(x_NPW)


class DecoderLayer(nn.Module):
    def __init__(self, lang: LanguageSpec, attn_cfg: LlamaConfig, moe_cfg: DeepseekV2Config, index: int):
        super().__init__()
        self.self_attn = LlamaAttention(attn_cfg, layer_idx=index)
        self.mlp = DeepseekV2Moe(moe_cfg) if lang.is_moe_layer(index) else DeepseekV2MLP(moe_cfg)
        self.input_layernorm = DeepseekV2RMSNorm(lang.hidden_size, eps=lang.rms_norm_eps)
        self.post_attention_layernorm = DeepseekV2RMSNorm(lang.hidden_size, eps=lang.rms_norm_eps)

    def forward(self, h_BTD, position_embeddings, attention_mask):
        attn, _ = self.self_attn(self.input_layernorm(h_BTD), position_embeddings=position_embeddings,
                                 attention_mask=attention_mask)
        h_BTD = h_BTD + attn
        return h_BTD + self.mlp(self.post_attention_layernorm(h_BTD))


class Decoder(nn.Module):
    """``language.model``: token embeddings, decoder layers, final RMSNorm."""

    def __init__(self, lang: LanguageSpec):
        super().__init__()
        self.attn_config = attention_config(lang)
        self.moe_config = moe_config(lang)
        self.embed_tokens = nn.Embedding(lang.vocab_size, lang.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(lang, self.attn_config, self.moe_config, i)
                                    for i in range(lang.num_hidden_layers))
        self.norm = DeepseekV2RMSNorm(lang.hidden_size, eps=lang.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(self.attn_config)

    def forward(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor | None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        B, T, _ = inputs_embeds.shape
        if position_ids is None:
            position_ids = torch.arange(T, device=inputs_embeds.device)[None].expand(B, T)
        mask = create_causal_mask(config=self.attn_config, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                                  past_key_values=None, position_ids=position_ids)
        pos = self.rotary_emb(inputs_embeds, position_ids)
        h = inputs_embeds
        for layer in self.layers:
            h = layer(h, pos, mask)
        return self.norm(h)


class Language(nn.Module):
    """``language``: the decoder and its LM head."""

    def __init__(self, lang: LanguageSpec):
        super().__init__()
        self.model = Decoder(lang)
        self.lm_head = nn.Linear(lang.hidden_size, lang.vocab_size, bias=False)


class DeepseekVL2ForCausalLM(nn.Module):
    """DeepSeek-VL2 (see the module docstring); ``forward`` returns next-token logits [B, T, V]."""

    base_model_prefix = "language"  # read by PEFT when it wraps the model (dp-lora)

    def __init__(self, config: Vl2Config):
        super().__init__()
        self.config = config
        self.vision = SiglipVisionModel(siglip_config(config.vision))
        self.projector = MlpProjector(config.projector)
        d = config.projector.n_embed
        self.image_newline = nn.Parameter(torch.zeros(d))
        self.view_seperator = nn.Parameter(torch.zeros(d))  # the release's spelling (its key name)
        self.language = Language(config.language)
        self.frozen_vision_()

    # ---------------------------------------------------------------- structure
    def vision_parameter_names(self) -> tuple[str, ...]:
        """Names of the frozen vision-side parameters (tower, projector, tile tags): neither role."""
        return tuple(n for n, _ in self.named_parameters() if not n.startswith("language."))

    def frozen_vision_(self) -> None:
        for name, p in self.named_parameters():
            if not name.startswith("language."):
                p.requires_grad_(False)

    def get_input_embeddings(self) -> nn.Module:
        return self.language.model.embed_tokens

    @property
    def num_image_tokens(self) -> int:
        """Image tokens per record: ``2 h (w + 1) + 1`` (global view, separator, one local tile)."""
        h = self.config.tokens_per_side
        return 2 * h * (h + 1) + 1

    # ---------------------------------------------------------------- images
    @torch.no_grad()
    def encode_image(self, image_3SS: torch.Tensor) -> torch.Tensor:
        """Image-token embeddings [num_image_tokens, D] of ONE image (uint8 or float in [0, 255])."""
        dtype = self.image_newline.dtype
        x = (image_3SS.to(dtype) / 255.0 - IMAGE_MEAN) / IMAGE_STD
        feats_PW = self.vision(pixel_values=x[None]).last_hidden_state
        tokens_HW_D = self.projector(feats_PW)[0]
        h = int(round(tokens_HW_D.shape[0] ** 0.5))
        grid = tokens_HW_D.reshape(h, h, -1)
        newline = self.image_newline.reshape(1, 1, -1).expand(h, 1, -1)
        view = torch.cat([grid, newline], dim=1).reshape(h * (h + 1), -1)
        # Single tile: the local view is the same padded image as the global view, so the release's
        # "head" order [global, sep, local] and "tail" order [local, sep, global] coincide.
        return torch.cat([view, self.view_seperator[None], view], dim=0)

    def embed(self, input_ids: torch.Tensor, images: torch.Tensor | None,
              images_seq_mask: torch.Tensor | None) -> torch.Tensor:
        embeds_BTD = self.language.model.embed_tokens(input_ids)
        if images is None:
            return embeds_BTD
        if images_seq_mask is None:
            raise DataError("images were given without images_seq_mask (the positions of the image tokens)")
        B = input_ids.shape[0]
        feats = []
        for r in range(B):  # one image per tower forward: no cross-record computation
            n = int(images_seq_mask[r].sum())
            if n == 0:
                continue
            f = self.encode_image(images[r])
            if n != f.shape[0]:
                raise DataError(f"record {r} has {n} image positions but its image gives {f.shape[0]} tokens")
            feats.append(f)
        if not feats:
            return embeds_BTD
        src = torch.cat(feats).to(embeds_BTD.dtype)
        return embeds_BTD.masked_scatter(images_seq_mask.bool()[..., None], src)

    # ---------------------------------------------------------------- forward
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                images: torch.Tensor | None = None, images_seq_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> CausalLMOutput:
        embeds_BTD = self.embed(input_ids, images, images_seq_mask)
        hidden_BTD = self.language.model(embeds_BTD, attention_mask, position_ids)
        return CausalLMOutput(logits=self.language.lm_head(hidden_BTD))
