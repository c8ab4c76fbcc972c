"""A tiny random DeepSeek-VL2 in the release's exact config schema and safetensors key layout.

:func:`write_tiny_vl2` writes a checkpoint directory that :func:`raptor.moe.vl2.load_vl2` (and
``raptor train --model DIR``) reads like a released one: ``config.json`` with ``vision_config`` /
``projector_config`` / ``language_config`` / ``tile_tag`` / ``global_view_pos`` /
``candidate_resolutions``, one safetensors shard with its index (release key names, per-expert
weights, fused ``attn.qkv``, the unused ``vision.attn_pool.*`` MAP head), and a tokenizer
(WordPiece trained on the synthetic VQA vocabulary and the prompt template, plus ``<image>``).
VL2-Tiny's shape in miniature: 3 decoder layers, the first dense (``first_k_dense_replace = 1``),
4 routed experts with top-2 softmax routing, shared experts, multi-head attention.

Random draws: every weight comes from the explicit ``generator``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from raptor.moe.models import init_weights_
from raptor.moe.vl2.config import LanguageSpec, ProjectorSpec, VisionSpec, Vl2Config
from raptor.moe.vl2.model import DeepseekVL2ForCausalLM
from raptor.moe.vl2.release_files import save_release_checkpoint


def tiny_vl2_config(vocab_size: int, *, hidden_size: int = 32, num_layers: int = 3, num_experts: int = 4,
                    top_k: int = 2, image_size: int = 32, pad_token_id: int = 0, bos_token_id: int = 2,
                    eos_token_id: int = 3) -> Vl2Config:
    width = 16
    return Vl2Config(
        vision=VisionSpec(model_name="siglip_tiny", image_size=image_size, patch_size=8, width=width, layers=1,
                          heads=2, mlp_ratio=2.0),
        projector=ProjectorSpec(projector_type="downsample_mlp_gelu", input_dim=width, n_embed=hidden_size, depth=2,
                                mlp_ratio=1, downsample_ratio=2),
        language=LanguageSpec(
            vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
            moe_intermediate_size=hidden_size // 2, num_hidden_layers=num_layers, num_attention_heads=4,
            num_key_value_heads=4, n_shared_experts=2, n_routed_experts=num_experts, num_experts_per_tok=top_k,
            first_k_dense_replace=1, topk_method="greedy", n_group=1, topk_group=1, max_position_embeddings=512,
            use_mla=False, pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id,
        ),
        tile_tag="2D", global_view_pos="head", candidate_resolutions=((image_size, image_size),),
    )


def tiny_tokenizer():
    """WordPiece on the synthetic VQA words and the prompt template, plus the ``<image>`` token."""
    from raptor.data.tokenization import train_wordpiece
    from raptor.data.vqa import synthetic_corpus

    tokenizer = train_wordpiece(synthetic_corpus(), vocab_size=200, min_frequency=1)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    return tokenizer


def random_map_head(width: int, mlp_hidden: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """``vision.attn_pool.*`` tensors with the shapes of the release's MAP head (latent length 1)."""
    shapes = {"latent": (1, 1, width), "q.weight": (width, width), "q.bias": (width,),
              "kv.weight": (2 * width, width), "kv.bias": (2 * width,), "proj.weight": (width, width),
              "proj.bias": (width,), "norm.weight": (width,), "norm.bias": (width,),
              "mlp.fc1.weight": (mlp_hidden, width), "mlp.fc1.bias": (mlp_hidden,),
              "mlp.fc2.weight": (width, mlp_hidden), "mlp.fc2.bias": (width,)}
    return {f"vision.attn_pool.{k}": torch.randn(s, generator=generator) * 0.02 for k, s in shapes.items()}


def build_tiny_vl2(config: Vl2Config, generator: torch.Generator) -> DeepseekVL2ForCausalLM:
    with torch.random.fork_rng(devices=[]):  # constructor draws are overwritten below
        model = DeepseekVL2ForCausalLM(config)
    init_weights_(model, generator)
    d = config.projector.n_embed
    with torch.no_grad():  # the release draws the tile tags as randn(d) / sqrt(d)
        model.image_newline.copy_(torch.randn(d, generator=generator) / d ** 0.5)
        model.view_seperator.copy_(torch.randn(d, generator=generator) / d ** 0.5)
    model.frozen_vision_()
    model.eval()
    return model


def write_tiny_vl2(directory: str | Path, *, generator: torch.Generator | None = None, **sizes) -> Path:
    """Write a tiny random VL2 checkpoint + tokenizer in the release layout; returns the directory."""
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    tokenizer = tiny_tokenizer()
    config = tiny_vl2_config(len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                             bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id, **sizes)
    model = build_tiny_vl2(config, generator)
    directory = save_release_checkpoint(
        model, directory, map_head=random_map_head(config.vision.width, config.vision.mlp_hidden, generator))
    tokenizer.save_pretrained(str(directory))
    return directory
