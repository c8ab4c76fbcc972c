"""Decoder upcycling (raptor.pretrain.upcycle_decoder): Llama / Mistral -> Mixtral and Qwen2 -> Qwen2-MoE
are exact at initialisation on tiny random models, work with the per-record engine's oracle, round-trip
through save_pretrained, draw only from the explicit generator, and refuse what cannot map exactly."""

from __future__ import annotations

import pytest
import torch
import transformers

from raptor.audit.engine_check import compare, synthetic_batch, to_float64
from raptor.errors import ConfigError
from raptor.moe.adapters import freeze_untrained_experts, get_adapter
from raptor.pretrain.upcycle_decoder import (
    DecoderUpcycleSpec,
    moe_decoder_config,
    spherical_kmeans,
    upcycle_decoder,
    upcycle_family,
)

TINY = dict(vocab_size=100, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
CLASSES = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
           "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
           "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)}


@torch.no_grad()
def _dense(model_type: str, seed: int = 0, **overrides) -> torch.nn.Module:
    """A tiny random dense decoder, float32, every weight from a seeded generator (norm scales near
    1, Qwen2's q/k/v biases nonzero)."""
    config_cls, model_cls = CLASSES[model_type]
    fields = dict(TINY)
    if model_type == "mistral":
        fields["sliding_window"] = 4  # shorter than the batch: the sliding mask must carry over
    fields.update(overrides)
    with torch.random.fork_rng(devices=[]):
        model = model_cls(config_cls(**fields))
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
        else:
            p.copy_(0.2 * torch.randn(p.shape, generator=g))
    return model.float().eval()


def _batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Three right-padded records of lengths 7, 4 and 1."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, TINY["vocab_size"], (3, 7), generator=g)
    mask = (torch.arange(7)[None, :] < torch.tensor([7, 4, 1])[:, None]).long()
    return torch.where(mask.bool(), ids, torch.zeros_like(ids)), mask


@torch.no_grad()
def _max_logit_diff(dense: torch.nn.Module, moe: torch.nn.Module) -> float:
    ids, mask = _batch()
    a = dense(input_ids=ids, attention_mask=mask).logits
    b = moe(input_ids=ids, attention_mask=mask).logits
    keep = mask.bool()
    return float((a[keep] - b[keep]).abs().max())


def test_upcycle_family():
    assert upcycle_family("llama") == "mixtral"
    assert upcycle_family("mistral") == "mixtral"
    assert upcycle_family("qwen2") == "qwen2_moe"
    with pytest.raises(ConfigError, match="raptor.pretrain.upcycle"):
        upcycle_family("bert")


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2"])
def test_exact_at_init(model_type):
    dense = _dense(model_type)
    rng = torch.get_rng_state()
    moe, report = upcycle_decoder(dense, num_experts=4, top_k=2, layers="all", generator=torch.Generator().manual_seed(3))
    assert torch.equal(rng, torch.get_rng_state())  # the global RNG is neither read for the result nor moved
    target = upcycle_family(model_type)
    assert moe.config.model_type == target and report["model_type"] == target
    assert report["moe_layers"] == [0, 1] and report["dense_layers"] == []
    cfg = moe.config
    assert cfg.router_aux_loss_coef == 0.0 and cfg.output_router_logits is False
    assert cfg.num_experts_per_tok == 2 and cfg.num_experts == 4
    if target == "mixtral":
        assert cfg.router_jitter_noise == 0.0
        assert cfg.sliding_window == (4 if model_type == "mistral" else None)
    else:
        assert cfg.norm_topk_prob is True and cfg.mlp_only_layers == [] and cfg.decoder_sparse_step == 1
        assert cfg.moe_intermediate_size == TINY["intermediate_size"]
    assert len(get_adapter(moe).moe_layers(moe)) == 2
    # the routers are not degenerate: tokens reach more than two experts, so the copies matter
    ids, mask = _batch()
    with torch.no_grad():
        x = moe.model.embed_tokens(ids)[mask.bool()]
        picked = (x @ moe.model.layers[0].mlp.gate.weight.t()).topk(2, dim=1).indices.unique()
    assert picked.numel() > 2
    assert _max_logit_diff(dense, moe) <= 1e-5


@pytest.mark.parametrize("shared_expert", ["zero", "split"])
def test_qwen2_partial_tied_and_shared_expert(shared_expert):
    dense = _dense("qwen2", seed=5, tie_word_embeddings=True, num_hidden_layers=3)
    moe, report = upcycle_decoder(dense, num_experts=4, top_k=2, layers="every-other", shared_expert=shared_expert,
                                  generator=torch.Generator().manual_seed(0))
    assert report["moe_layers"] == [1] and report["dense_layers"] == [0, 2]
    assert moe.config.mlp_only_layers == [0, 2] and moe.config.tie_word_embeddings
    assert type(moe.model.layers[0].mlp).__name__ == "Qwen2MoeMLP"
    block = moe.model.layers[1].mlp
    assert torch.count_nonzero(block.shared_expert_gate.weight) == 0
    if shared_expert == "zero":
        assert torch.count_nonzero(block.shared_expert.down_proj.weight) == 0
    assert _max_logit_diff(dense, moe) <= 1e-5
    moe2, _ = upcycle_decoder(dense, layers=[0, 2], top_k=1, generator=torch.Generator().manual_seed(0))
    assert moe2.config.mlp_only_layers == [1]
    assert _max_logit_diff(dense, moe2) <= 1e-5


def test_state_dict_and_config_json_input_and_roundtrip(tmp_path):
    dense = _dense("llama", seed=2)
    pair = (dense.config.to_dict(), dense.state_dict())
    moe, _ = upcycle_decoder(pair, num_experts=3, top_k=2, generator=torch.Generator().manual_seed(1))
    a, _ = upcycle_decoder(dense, num_experts=3, top_k=2, generator=torch.Generator().manual_seed(1))
    for (n, p), (_, q) in zip(moe.named_parameters(), a.named_parameters(), strict=True):
        assert torch.equal(p, q), n  # same seed, same model
    assert _max_logit_diff(dense, moe) <= 1e-5
    moe.save_pretrained(str(tmp_path))
    with torch.random.fork_rng(devices=[]):
        back = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32).eval()
    assert type(back).__name__ == "MixtralForCausalLM"
    assert _max_logit_diff(dense, back) <= 1e-5


def test_kmeans_router_on_public_batches():
    dense = _dense("mistral", seed=4)
    g = torch.Generator().manual_seed(9)
    public = [(torch.randint(3, 100, (4, 12), generator=g), torch.ones(4, 12, dtype=torch.long)) for _ in range(3)]
    moe, report = upcycle_decoder(dense, num_experts=4, top_k=2, router="kmeans", public_batches=public,
                                  exclude_ids=[1], generator=torch.Generator().manual_seed(0))
    assert _max_logit_diff(dense, moe) <= 1e-5
    for i in ("0", "1"):
        entry = report["routing"][i]
        assert entry["router"] == "kmeans" and entry["tokens"] == 144
        assert abs(sum(entry["expert_shares"]) - 1) < 1e-3 and 0 < entry["load_entropy"] <= entry["max_entropy"]
        w = moe.model.layers[int(i)].mlp.gate.weight
        assert torch.allclose(w.norm(dim=1), torch.ones(4), atol=1e-5)  # unit centroid directions
    again, _ = upcycle_decoder(dense, num_experts=4, top_k=2, router="kmeans", public_batches=public,
                               exclude_ids=[1], generator=torch.Generator().manual_seed(0))
    assert torch.equal(again.model.layers[1].mlp.gate.weight, moe.model.layers[1].mlp.gate.weight)


def test_spherical_kmeans_finds_directions():
    g = torch.Generator().manual_seed(0)
    dirs = torch.eye(4, 8) * 3
    x = torch.cat([dirs[e] * (1 + torch.rand(50, 1, generator=g)) + 0.05 * torch.randn(50, 8, generator=g)
                   for e in range(4)])
    c = spherical_kmeans(x, 4, torch.Generator().manual_seed(1))
    assert sorted(c.abs().argmax(1).tolist()) == [0, 1, 2, 3]
    with pytest.raises(ConfigError, match="at least 4 public tokens"):
        spherical_kmeans(x[:3], 4, g)


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_engine_oracle_on_upcycled_classifier(model_type):
    dense = _dense(model_type, seed=6)
    g = torch.Generator().manual_seed(0)
    moe, report = upcycle_decoder(dense, num_experts=4, top_k=2, head="classification", num_labels=2, generator=g)
    assert type(moe).__name__.endswith("ForSequenceClassification") and report["new_parameters"] == ["score.weight"]
    with torch.no_grad():
        ids, mask = _batch()
        a = dense.model(input_ids=ids, attention_mask=mask).last_hidden_state
        b = moe.model(input_ids=ids, attention_mask=mask).last_hidden_state
        assert float((a - b)[mask.bool()].abs().max()) <= 1e-5
    model = to_float64(moe)
    get_adapter(model).prepare(model)
    freeze_untrained_experts(model, [1])
    batch = synthetic_batch(TINY["vocab_size"], 4, 8, g)
    result = compare(model, batch, trained_layers=[1], grouping="roles")
    assert result.passed, result.to_dict()


def test_refusals():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ConfigError, match="attention_bias=True"):
        upcycle_decoder(_dense("llama", attention_bias=True), generator=g)
    with pytest.raises(ConfigError, match="mlp_bias=True"):
        upcycle_decoder(_dense("llama", mlp_bias=True), generator=g)
    with pytest.raises(ConfigError, match="layers='all' only"):
        upcycle_decoder(_dense("mistral"), layers="every-other", generator=g)
    with pytest.raises(ConfigError, match="sliding-window"):
        moe_decoder_config(transformers.Qwen2Config(**TINY, use_sliding_window=True, sliding_window=4),
                           DecoderUpcycleSpec())
    with pytest.raises(ConfigError, match="top_k"):
        upcycle_decoder(_dense("llama"), num_experts=4, top_k=5, generator=g)
    with pytest.raises(ConfigError, match="public inputs"):
        upcycle_decoder(_dense("llama"), router="kmeans", generator=g)
    with pytest.raises(ConfigError, match="shared_expert"):
        upcycle_decoder(_dense("qwen2"), shared_expert="half", generator=g)
    with pytest.raises(ConfigError, match="explicit torch.Generator"):
        upcycle_decoder(_dense("llama"), generator=None)
    with pytest.raises(ConfigError, match="model_type"):
        upcycle_decoder(({"model_type": "gpt2"}, {}), generator=g)
    with pytest.raises(ConfigError, match="--moe-layers"):
        upcycle_decoder(_dense("qwen2"), layers=[5], generator=g)
    dense = _dense("llama")
    state = dict(dense.state_dict())
    state["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(32)
    with pytest.raises(ConfigError, match="no place in mixtral"):
        upcycle_decoder((dense.config, state), generator=g)
    del state["model.layers.0.self_attn.q_proj.bias"], state["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(ConfigError, match="no 'model.layers.1.mlp.up_proj.weight'"):
        upcycle_decoder((dense.config, state), generator=g)


def test_rope_guard_refuses_other_frequencies():
    from raptor.pretrain.upcycle_decoder import _check_rope

    dense = _dense("llama")
    moe, _ = upcycle_decoder(dense, generator=torch.Generator().manual_seed(0))
    _check_rope(dense.config, moe)  # same frequencies: accepted
    moe.model.rotary_emb.inv_freq.mul_(1.5)
    with pytest.raises(ConfigError, match="other rotary frequencies"):
        _check_rope(dense.config, moe)
