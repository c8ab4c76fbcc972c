"""Rule 6: a pre-trained checkpoint's missing classification head is drawn from an explicit generator."""

from __future__ import annotations

import torch

from raptor.moe.models import TinySize, build_model, load_model

SIZE = TinySize(vocab_size=40, hidden_size=16, num_layers=1, num_heads=2, num_experts=2, expert_intermediate=16)


def _checkpoint_without_head(tmp_path):
    model = build_model("switch_transformers", num_labels=2, generator=torch.Generator().manual_seed(3), size=SIZE)
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("classifier.")}
    model.save_pretrained(str(tmp_path), state_dict=state)
    return model


def test_missing_head_comes_from_the_generator_not_the_global_rng(tmp_path):
    saved = _checkpoint_without_head(tmp_path)
    torch.manual_seed(1)
    a = load_model(tmp_path, num_labels=2, generator=torch.Generator().manual_seed(7))
    torch.manual_seed(2)
    before = torch.get_rng_state()
    b = load_model(tmp_path, num_labels=2, generator=torch.Generator().manual_seed(7))
    assert torch.equal(torch.get_rng_state(), before), "loading must not advance the global RNG"
    c = load_model(tmp_path, num_labels=2, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a.classifier.weight, b.classifier.weight)  # same generator, different global seeds
    assert not torch.equal(a.classifier.weight, c.classifier.weight)  # the generator decides
    expected = torch.randn(a.classifier.weight.shape, generator=torch.Generator().manual_seed(7)) * 0.02
    torch.testing.assert_close(a.classifier.weight, expected, rtol=0, atol=0)
    assert torch.count_nonzero(a.classifier.bias) == 0
    for name, value in saved.state_dict().items():  # the backbone is the checkpoint's, untouched
        if not name.startswith("classifier."):
            assert torch.equal(a.state_dict()[name], value), name


def test_a_head_present_in_the_checkpoint_is_loaded_not_redrawn(tmp_path):
    saved = build_model("switch_transformers", num_labels=2, generator=torch.Generator().manual_seed(3), size=SIZE)
    saved.save_pretrained(str(tmp_path))
    loaded = load_model(tmp_path, num_labels=2, generator=torch.Generator().manual_seed(9))
    assert torch.equal(loaded.classifier.weight, saved.classifier.weight)
