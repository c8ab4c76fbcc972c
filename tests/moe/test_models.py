"""Tiny models of every family: forward, backward, save_pretrained/from_pretrained round trip."""

from __future__ import annotations

import pytest
import torch

from raptor.errors import ConfigError, UnsupportedModelError
from raptor.moe.models import FAMILIES, TinySize, build_model, classification_class, load_model, tiny_config


def _batch(vocab: int = 512):
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(3, vocab, (3, 9), generator=g)
    attention_mask = torch.ones(3, 9, dtype=torch.long)
    attention_mask[1, 6:] = 0  # right padding
    attention_mask[2, :] = 0  # an empty record
    return input_ids, attention_mask, torch.tensor([0, 1, 1])


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_backward_reaches_every_parameter(family):
    model = build_model(family)
    model.train()
    input_ids, attention_mask, labels = _batch()
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    assert out.logits.shape == (3, 2)
    assert torch.isfinite(out.logits).all()
    out.loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert missing == [], f"{family}: parameters without gradient: {missing}"


@pytest.mark.parametrize("family", FAMILIES)
def test_save_pretrained_round_trip(family, tmp_path):
    model = build_model(family, num_labels=3)
    model.save_pretrained(tmp_path)
    loaded = load_model(tmp_path)
    assert type(loaded) is type(model)
    assert loaded.config.num_labels == 3
    input_ids, attention_mask, _ = _batch()
    with torch.no_grad():
        a = model(input_ids=input_ids, attention_mask=attention_mask).logits
        b = loaded(input_ids=input_ids, attention_mask=attention_mask).logits
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    for (na, pa), (nb, pb) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert na == nb
        torch.testing.assert_close(pa, pb, rtol=0, atol=0)


def test_generator_controls_the_weights():
    a = build_model("olmoe", generator=torch.Generator().manual_seed(5))
    b = build_model("olmoe", generator=torch.Generator().manual_seed(5))
    c = build_model("olmoe", generator=torch.Generator().manual_seed(6))
    wa, wb, wc = (m.model.embed_tokens.weight for m in (a, b, c))
    assert torch.equal(wa, wb)
    assert not torch.equal(wa, wc)


def test_build_does_not_touch_global_rng():
    before = torch.random.get_rng_state()
    build_model("mixtral", generator=torch.Generator().manual_seed(0))
    assert torch.equal(before, torch.random.get_rng_state())


@pytest.mark.parametrize("family", FAMILIES)
def test_batch_coupling_features_are_off(family):
    config = tiny_config(family)
    for field in ("router_aux_loss_coef", "router_z_loss_coef", "router_jitter_noise"):
        if hasattr(config, field):
            assert getattr(config, field) == 0.0, field
    assert not getattr(config, "output_router_logits", False)


def test_switch_mean_pooling_ignores_padding():
    model = build_model("switch_transformers")
    input_ids, attention_mask, _ = _batch()
    with torch.no_grad():
        full = model(input_ids=input_ids[1:2, :6], attention_mask=attention_mask[1:2, :6]).logits
        padded = model(input_ids=input_ids[1:2], attention_mask=attention_mask[1:2]).logits
    torch.testing.assert_close(full, padded, rtol=1e-5, atol=1e-6)


def test_unknown_family_lists_supported():
    with pytest.raises(UnsupportedModelError, match="olmoe"):
        classification_class("gpt2")
    with pytest.raises(UnsupportedModelError, match="switch_transformers"):
        build_model("llama")


def test_bad_sizes_are_rejected_with_the_field_name():
    with pytest.raises(ConfigError, match="top_k"):
        TinySize(num_experts=2, top_k=3)
    with pytest.raises(ConfigError, match="hidden_size"):
        TinySize(hidden_size=30, num_heads=4)


def test_load_model_rejects_a_directory_without_config(tmp_path):
    with pytest.raises(ConfigError, match="config.json"):
        load_model(tmp_path)
