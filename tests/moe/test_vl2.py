"""DeepSeek-VL2: the release layout loads, image tokens are placed per record, the engine matches a
one-record loop, and the vision side stays frozen."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from raptor.audit.engine_check import compare, to_float64
from raptor.data.tokenization import load_tokenizer
from raptor.data.vl2_processor import Vl2Processor
from raptor.data.vl2_tiny import write_tiny_vl2
from raptor.data.vqa import make_synthetic_vqa, read_vqa_jsonl
from raptor.errors import UnsupportedModelError
from raptor.moe.adapters import get_adapter
from raptor.moe.vl2 import load_vl2
from raptor.moe.vl2.release_files import raptor_to_release, release_to_raptor
from raptor.training.generate import answer_loss_per_record, greedy_generate


@pytest.fixture(scope="module")
def vl2_dir(tmp_path_factory):
    return write_tiny_vl2(tmp_path_factory.mktemp("vl2"), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def vqa(tmp_path_factory):
    return read_vqa_jsonl(make_synthetic_vqa(tmp_path_factory.mktemp("vqa"), num_images=4, seed=1))


def test_checkpoint_is_in_the_release_layout(vl2_dir):
    config = json.loads((vl2_dir / "config.json").read_text())
    assert config["model_type"] == "deepseek_vl_v2" and config["tile_tag"] == "2D"
    assert {"vision_config", "projector_config", "language_config", "global_view_pos",
            "candidate_resolutions"} <= set(config)
    assert config["language_config"]["use_mla"] is False
    index = json.loads((vl2_dir / "model.safetensors.index.json").read_text())["weight_map"]
    keys = set(index)
    for key in ("vision.pos_embed", "vision.patch_embed.proj.weight", "vision.blocks.0.attn.qkv.weight",
                "vision.attn_pool.latent", "vision.norm.weight", "projector.layers.0.weight",
                "projector.layers.2.weight", "image_newline", "view_seperator",
                "language.model.embed_tokens.weight", "language.model.layers.0.mlp.gate_proj.weight",
                "language.model.layers.1.mlp.gate.weight", "language.model.layers.1.mlp.experts.3.up_proj.weight",
                "language.model.layers.2.mlp.shared_experts.down_proj.weight",
                "language.model.layers.1.self_attn.q_proj.weight", "language.lm_head.weight"):
        assert key in keys, key
    with safe_open(str(vl2_dir / next(iter(set(index.values())))), "pt") as f:
        assert set(f.keys()) == keys


def test_load_maps_names_and_round_trips(vl2_dir):
    model = load_vl2(vl2_dir)
    with safe_open(str(vl2_dir / "model-00001-of-00001.safetensors"), "pt") as f:
        release = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    mapped = release_to_raptor(release, model.config)
    for name, p in model.named_parameters():
        assert torch.equal(p.detach(), mapped[name]), name
    # qkv rows split in q, k, v order; expert e's gate and up stacked
    W = model.config.vision.width
    q = model.vision.encoder.layers[0].self_attn.q_proj.weight
    assert torch.equal(q, release["vision.blocks.0.attn.qkv.weight"][:W])
    gu = model.language.model.layers[1].mlp.experts.gate_up_proj
    assert torch.equal(gu[2], torch.cat([release["language.model.layers.1.mlp.experts.2.gate_proj.weight"],
                                         release["language.model.layers.1.mlp.experts.2.up_proj.weight"]]))
    back = raptor_to_release({n: p.detach() for n, p in model.named_parameters()}, model.config)
    assert set(back) == {k for k in release if not k.startswith("vision.attn_pool.")}
    assert all(torch.equal(back[k], release[k]) for k in back)


def test_unsupported_config_fields_are_named(vl2_dir, tmp_path):
    config = json.loads((vl2_dir / "config.json").read_text())
    config["language_config"]["use_mla"] = True
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="use_mla"):
        load_vl2(tmp_path)


def test_vision_side_is_frozen_and_in_no_group(vl2_dir):
    model = load_vl2(vl2_dir)
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert frozen and all(n.startswith(("vision.", "projector.", "image_newline", "view_seperator")) for n in frozen)
    model.projector.layers[0].weight.requires_grad_(True)
    with pytest.raises(UnsupportedModelError, match="projector.layers.0.weight"):
        get_adapter(model).prepare(model)


def test_image_tokens_follow_the_release_layout(vl2_dir, vqa):
    model = load_vl2(vl2_dir)
    proc = Vl2Processor(model, load_tokenizer(vl2_dir))
    h = model.config.tokens_per_side
    assert model.num_image_tokens == 2 * h * (h + 1) + 1
    rec = proc.encode(vqa.subset([0, 1]), max_length=40)
    assert rec["images"].dtype == torch.uint8 and rec["images_seq_mask"].sum(1).tolist() == [model.num_image_tokens] * 2
    feats = model.encode_image(rec["images"][0])
    D = model.config.projector.n_embed
    rows = feats[: h * (h + 1)].reshape(h, h + 1, D)
    assert torch.equal(rows[:, -1], model.image_newline.detach().expand(h, D))  # newline after each row
    assert torch.equal(feats[h * (h + 1)], model.view_seperator.detach())
    emb = model.embed(rec["input_ids"], rec["images"], rec["images_seq_mask"])
    assert torch.equal(emb[0][rec["images_seq_mask"][0]], feats)
    # each record's image is encoded alone: a batch equals its records one by one
    alone = model.embed(rec["input_ids"][1:], rec["images"][1:], rec["images_seq_mask"][1:])
    assert torch.equal(emb[1], alone[0])


@pytest.mark.parametrize("grouping", ["roles", "dense"])
def test_engine_matches_one_record_loop(vl2_dir, vqa, grouping):
    model = to_float64(load_vl2(vl2_dir))
    model.language.model.layers[2].mlp.experts.requires_grad_(False)  # train layer 1's experts only
    proc = Vl2Processor(model, load_tokenizer(vl2_dir))
    batch = proc.encode(vqa.subset(range(5)), max_length=40)
    batch["attention_mask"][3, 30:] = 0  # a shorter record
    batch["labels"][3, 30:] = -100
    report = compare(model, batch, trained_layers=[1] if grouping == "roles" else [], grouping=grouping,
                     loss_fn=answer_loss_per_record, tolerance=1e-6)
    assert report.passed, report
    assert report.clipped_groups > 0


def test_generates_from_an_image_prompt(vl2_dir, vqa):
    model = load_vl2(vl2_dir)
    proc = Vl2Processor(model, load_tokenizer(vl2_dir))
    ev = proc.generation_eval(vqa.subset([0]), max_new_tokens=3)
    out = greedy_generate(model, ev.prompts[0], max_new_tokens=3, eos_id=ev.eos_id)
    assert len(out) <= 3 and all(0 <= t < model.config.vocab_size for t in out)
