"""raptor pretrain on tiny models: privacy of the inputs, resume, the saved directory, objectives."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from raptor.mechanisms import seeded_generator
from raptor.moe.adapters import get_adapter
from raptor.moe.models import load_model
from raptor.pretrain import PretrainConfig, pretrain
from raptor.pretrain.objectives import mask_tokens
from raptor.pretrain.routing import RouterCapture, router_losses, routing_statistics

PUBLIC = [
    "the cat sat on the mat and the dog ran away quickly today",
    "another paragraph of public text about films books and songs",
    "a short story about a small red boat on a quiet river",
    "people walked along the river and talked about the weather",
]
SECRET = "zqxjvwsecretword"


def _public_dir(tmp_path: Path) -> Path:
    d = tmp_path / "public"
    d.mkdir(parents=True, exist_ok=True)
    (d / "a.txt").write_text("\n".join(PUBLIC * 15) + "\n")
    (d / "b.txt").write_text("\n".join(reversed(PUBLIC * 15)) + "\n")
    return d


def _config(tmp_path: Path, family: str = "switch_transformers", **kw) -> PretrainConfig:
    base = dict(output_dir=str(tmp_path / f"out-{family}"), text=(str(_public_dir(tmp_path)),), family=family,
                vocab_size=120, hidden_size=16, num_layers=2, num_heads=2, num_experts=4, top_k=2,
                expert_intermediate=16, block_length=16, batch_size=4, steps=6, warmup_steps=2, eval_every=3,
                eval_blocks=4, checkpoint_every=3, held_out_every=3, stats_records=8, seed=0)
    base.update(kw)
    return PretrainConfig(**base)


def test_pretraining_opens_no_private_file_and_private_text_never_reaches_the_tokenizer(tmp_path, record_opens):
    private = tmp_path / "private_train.csv"
    private.write_text(f"sentence,label\n{SECRET} is a private record,1\n")
    with record_opens() as opened:
        result = pretrain(_config(tmp_path), progress=False)
    assert opened, "the spy saw no file at all: it would not catch a private read"
    assert not any(Path(p).name == private.name for p in opened)
    vocab = json.loads((result.output_dir / "tokenizer.json").read_text())["model"]["vocab"]
    assert not any(SECRET[:6] in tok for tok in vocab)
    assert {f["name"] for f in result.report["files"]} == {"a.txt", "b.txt"}


def test_a_private_word_in_the_public_text_does_reach_the_tokenizer(tmp_path):
    """The check above can fail: the same word, given as public text, is in the vocabulary."""
    cfg = _config(tmp_path)
    (Path(cfg.text[0]) / "c.txt").write_text(f"{SECRET} {SECRET}\n" * 30)
    result = pretrain(cfg, progress=False)
    vocab = json.loads((result.output_dir / "tokenizer.json").read_text())["model"]["vocab"]
    assert any(SECRET[:6] in tok for tok in vocab)


@pytest.mark.parametrize("family", ["switch_transformers", "olmoe"])
def test_resume_continues_the_same_run_exactly(tmp_path, family):
    full = pretrain(_config(tmp_path / "a", family), progress=False)
    cfg = _config(tmp_path / "b", family)
    assert pretrain(cfg, progress=False, stop_after=3) is None
    resumed = pretrain(cfg, resume=True, progress=False)
    a = torch.load(full.output_dir / "checkpoint" / "state.pt", weights_only=False)["model"]
    b = torch.load(resumed.output_dir / "checkpoint" / "state.pt", weights_only=False)["model"]
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert resumed.report["held_out_loss"] == full.report["held_out_loss"]


@pytest.mark.parametrize("family", ["switch_transformers", "olmoe", "qwen3_moe"])
def test_output_loads_as_a_float32_classifier_with_the_pretrained_backbone(tmp_path, family):
    result = pretrain(_config(tmp_path, family), progress=False)
    report = result.report
    assert report["objective"] == ("mlm" if family == "switch_transformers" else "causal")
    assert report["steps"] == 6 and report["tokens_per_second"] > 0
    assert set(report["routing_before"]) == set(report["routing_after"]) == {"public_held_out"}
    for layer in report["routing_after"]["public_held_out"].values():
        assert abs(sum(layer["load_shares"]) - 1) < 1e-3
    assert (result.output_dir / "pretrain.json").is_file()
    model = load_model(result.output_dir, num_labels=3)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    saved = torch.load(result.output_dir / "checkpoint" / "state.pt", weights_only=False)["model"]
    backbone = "switch." if family == "switch_transformers" else "model."
    loaded = model.state_dict()
    shared = [k for k in saved if k.startswith(backbone) and k in loaded]
    assert len(shared) > 10
    for k in shared:  # float16 storage: equal up to half precision
        torch.testing.assert_close(loaded[k], saved[k].half().float())
    # private fine-tuning switches the pre-training-only features off
    get_adapter(model).prepare(model)
    assert all(v in (0, 0.0, False, None) for v in get_adapter(model).aux_policy(model).values())


def test_existing_output_needs_resume(tmp_path):
    cfg = _config(tmp_path)
    pretrain(cfg, progress=False, stop_after=3)
    with pytest.raises(Exception, match="--resume"):
        pretrain(cfg, progress=False)
    other = _config(tmp_path, lr=5e-4)
    with pytest.raises(Exception, match="lr"):
        pretrain(other, resume=True, progress=False)


def test_mask_tokens_follows_bert_rates_and_spares_specials():
    ids = torch.randint(4, 100, (64, 128), generator=seeded_generator(0))
    ids[:, 0] = 2
    out, chosen = mask_tokens(ids, mask_id=100, vocab_size=101, special_ids=(0, 1, 2, 3, 100), mask_prob=0.15,
                              generator=seeded_generator(1))
    assert not chosen[:, 0].any()
    rate = chosen[:, 1:].float().mean().item()
    assert 0.13 < rate < 0.17
    masked = (out == 100) & chosen
    assert 0.75 < masked.sum().item() / chosen.sum().item() < 0.85
    assert torch.equal(out[~chosen], ids[~chosen])
    again, chosen2 = mask_tokens(ids, mask_id=100, vocab_size=101, special_ids=(0, 1, 2, 3, 100), mask_prob=0.15,
                                 generator=seeded_generator(1))
    assert torch.equal(again, out) and torch.equal(chosen, chosen2)


def test_router_losses_match_the_formula_and_statistics_see_token_dependence():
    from raptor.moe.models import TinySize, tiny_config
    from raptor.pretrain.lm import build_lm

    cfg = tiny_config("olmoe", size=TinySize(vocab_size=50, hidden_size=16, num_layers=2, num_heads=2,
                                             num_experts=4, top_k=2, expert_intermediate=8))
    model = build_lm(cfg, seeded_generator(0))
    ids = torch.randint(0, 50, (3, 7), generator=seeded_generator(1))
    with RouterCapture(model) as cap:
        model(input_ids=ids)
        lb, z = router_losses(cap, torch.ones_like(ids))
        expect_lb, expect_z = [], []
        for layer in cap.layers.values():
            p = layer.logits_NE.float().softmax(-1)
            f = torch.bincount(layer.index_NK.reshape(-1), minlength=4).float() / layer.index_NK.numel()
            expect_lb.append(4 * (f * p.mean(0)).sum())
            expect_z.append((layer.logits_NE.float().logsumexp(-1) ** 2).mean())
    torch.testing.assert_close(lb, torch.stack(expect_lb).mean())
    torch.testing.assert_close(z, torch.stack(expect_z).mean())
    # a router whose weights are zero routes every token the same way: MI 0, token entropy log E
    for info in get_adapter(model).moe_layers(model):
        info.router.weight.data.zero_()
    stats = routing_statistics(model, ids, torch.ones_like(ids))
    for layer in stats.values():
        assert abs(layer["token_expert_mutual_information"]) < 1e-9
        assert abs(layer["top1_token_mutual_information"]) < 1e-9
        assert layer["top1_modal_share"] == 1.0
        assert abs(layer["mean_token_router_entropy"] - torch.log(torch.tensor(4.0)).item()) < 1e-6


def test_hard_token_mi_against_hand_values():
    from raptor.pretrain.routing import _count_joint, _hard_token_mi

    # a fixed token -> expert map over 4 equally frequent tokens and 4 experts: I = H(E) = log 4
    joint: dict = {}
    tokens = torch.arange(4).repeat(250)
    _count_joint(joint, tokens, tokens % 4, 4)
    out = _hard_token_mi(joint, 4)
    assert abs(out["top1_token_mutual_information"] - math.log(4)) < 1e-12
    assert out["top1_modal_share"] == 1.0
    # two tokens, two experts, token 0 -> (3, 1), token 1 -> (1, 3): I = log 2 - H(3/4, 1/4)
    joint = {0: [3, 1], 1: [1, 3]}
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    out = _hard_token_mi(joint, 2)
    assert abs(out["top1_token_mutual_information"] - (math.log(2) - h)) < 1e-12
    assert abs(out["top1_token_mutual_information_corrected"] - (math.log(2) - h - 1 / 16)) < 1e-12
    assert out["top1_modal_share"] == 0.75
    # routing independent of the token: the corrected estimate is close to 0, the raw one is not
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 200, (20000,), generator=g)
    experts = torch.randint(0, 8, (20000,), generator=g)
    joint = {}
    _count_joint(joint, tokens, experts, 8)
    out = _hard_token_mi(joint, 8)
    assert out["top1_token_mutual_information"] > 0.02
    assert abs(out["top1_token_mutual_information_corrected"]) < 0.01
