"""`raptor train --objective generate` end to end: tiny DeepSeek-VL2 on synthetic VQA, tiny OLMoE on text QA."""

from __future__ import annotations

import json
import re

import pytest
import torch

from raptor.cli.main import main
from raptor.data.vl2_tiny import write_tiny_vl2
from raptor.data.vqa import make_synthetic_vqa, read_vqa_jsonl
from raptor.errors import DataError
from raptor.moe.vl2 import load_vl2


@pytest.fixture(scope="module")
def vl2_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("vl2cli")
    write_tiny_vl2(d / "model", generator=torch.Generator().manual_seed(0))
    make_synthetic_vqa(d / "data", num_images=20, seed=0, name="train.jsonl")
    make_synthetic_vqa(d / "data", num_images=3, seed=1, name="dev.jsonl")
    return d


def _vl2_args(d, out, method):
    return ["train", "--model", str(d / "model"), "--objective", "generate",
            "--train-file", str(d / "data" / "train.jsonl"), "--validation-file", str(d / "data" / "dev.jsonl"),
            "--method", method, "--batch-size", "8", "--set", "performance.micro_batch_size=8", "--steps", "2", "--lr", "3e-3",
            "--max-length", "40", "--public-size", "8", "--seed", "0", "--output-dir", str(out), "--no-progress",
            "--set", "run.max_new_tokens=2", "--set", "data.max_eval_samples=2", "--epsilon", "8", "--delta", "1e-5", "--set", "privacy.shared_ratio=0.9"]


@pytest.mark.parametrize("method,extra", [("raptor", ["--set", "privacy.schedule.alternate=1,1", "--set", "run.freeze_shared_experts=true"]),
                                          ("dpsgd", []), ("dp-lora", ["--lora", "16"])])
def test_vl2_trains_under_dp_and_generates(vl2_files, tmp_path, method, extra, capsys):
    out = tmp_path / method
    assert main(_vl2_args(vl2_files, out, method) + extra) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["objective"] == "generate" and res["steps"] == 2
    assert 0 < res["epsilon"] <= 8.0 and res["delta"] == 1e-5
    assert 0.0 <= res["final_exact_match"] <= 1.0 and 0.0 <= res["final_token_f1"] <= 1.0
    assert res["zero_shot"]["records"] == 2 and len(res["examples"]) == 2
    assert res["data"]["private_records"] == 32 and res["data"]["public_records"] == 8
    trained = json.dumps(res["streams"])
    assert "vision" not in trained and "projector" not in trained
    if method == "raptor":
        assert res["trained_layers"] and res["freeze_shared_experts"] is True
    assert "exact match" in capsys.readouterr().out
    # the final model: the release layout load_vl2 reads, with the tokenizer (LoRA merged for dp-lora)
    assert res["final_model"] == str(out / "model") and (out / "model" / "tokenizer.json").is_file()
    final = load_vl2(out / "model")
    trained = dict(final.named_parameters())
    base = dict(load_vl2(vl2_files / "model").named_parameters())
    assert trained.keys() == base.keys()
    assert any(not torch.equal(trained[n], base[n]) for n in base)  # it holds the fine-tuned weights


def test_vl2_vision_side_and_frozen_shared_experts_do_not_move(vl2_files, tmp_path):
    from raptor.cli.main import build_parser
    from raptor.cli.train import config_from_args
    from raptor.cli.train_generate import generate_source
    from raptor.data.generate_inputs import encode_generative, read_generate_inputs
    from raptor.training.generate import GenerativeObjective
    from raptor.training.run.assemble import build_trainer

    args = build_parser().parse_args(_vl2_args(vl2_files, tmp_path / "x", "raptor") + ["--set", "run.freeze_shared_experts=true", "--no-lora"])
    config_from_args(args)  # every setting on the namespace
    inputs = read_generate_inputs(generate_source(args), torch.Generator().manual_seed(0))
    model, tok = inputs.model, inputs.tokenizer
    train, public, val, ev = encode_generative(model, tok, inputs.private, inputs.public, inputs.dev,
                                               max_length=args.max_length, max_new_tokens=args.max_new_tokens)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = build_trainer(config_from_args(args), model, train=train, validation=val, public=public,
                            objective=GenerativeObjective(evaluation=ev, tokenizer=tok, freeze_shared_experts=True))
    trainer.run_steps(2)
    moved = {n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert moved and not any(n.startswith(("vision.", "projector.", "image_newline", "view_seperator"))
                             or ".shared_experts." in n for n in moved)
    assert any(".mlp.experts." in n for n in moved)  # the routed experts of the trained layer did move


def test_missing_or_corrupt_image_names_the_line_before_training(vl2_files, tmp_path, capsys):
    data = tmp_path / "bad.jsonl"
    (tmp_path / "broken.png").write_bytes(b"not a png")
    good = json.loads((vl2_files / "data" / "train.jsonl").read_text().splitlines()[0])
    good["image"] = str(vl2_files / "data" / good["image"])
    rows = [good, dict(good, image="missing.png"), dict(good, image="broken.png")]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = _vl2_args(vl2_files, tmp_path / "out", "raptor")
    args[args.index("--train-file") + 1] = str(data)
    assert main(args) == 2
    assert re.search(r"bad.jsonl, line 2: image .*missing.png does not exist", capsys.readouterr().err)
    data.write_text("".join(json.dumps(r) + "\n" for r in [rows[0], rows[2]]))
    assert main(args) == 2
    assert re.search(r"bad.jsonl, line 2: image .*broken.png cannot be decoded", capsys.readouterr().err)
    assert not (tmp_path / "out").exists()
    with pytest.raises(DataError, match="line 2"):
        read_vqa_jsonl(data)


def test_olmoe_generative_fine_tuning_from_the_cli(tmp_path):
    rows = [{"prompt": f"colour of item {i}?", "answer": ["red", "blue", "green"][i % 3]} for i in range(60)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:50]))
    (tmp_path / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[50:]))
    out = tmp_path / "run"
    assert main(["train", "--model", "olmoe", "--objective", "generate", "--train-file", str(tmp_path / "train.jsonl"),
                 "--validation-file", str(tmp_path / "dev.jsonl"), "--method", "raptor", "--batch-size", "8",
                 "--steps", "2", "--max-length", "16", "--set", "model.hidden_size=16", "--public-size", "10", "--seed", "0",
                 "--output-dir", str(out), "--no-progress", "--set", "run.max_new_tokens=2"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["steps"] == 2 and res["final_exact_match"] is not None and res["trained_layers"]


def test_loaded_vl2_after_training_keeps_release_names(vl2_files):
    model = load_vl2(vl2_files / "model")
    assert model.language.model.layers[0].mlp.__class__.__name__ == "DeepseekV2MLP"  # first_k_dense_replace
    assert model.language.model.layers[1].mlp.__class__.__name__ == "DeepseekV2Moe"
