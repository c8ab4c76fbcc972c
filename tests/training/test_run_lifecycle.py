"""Issue 15 items 5, 9, 10: checks before spending, the budget stop saves first, small-data
defaults printed first, the final save_pretrained model and ``raptor predict``."""

from __future__ import annotations

import csv
import json

import pytest

from raptor.cli.main import main

WORDS = ["good", "bad", "great", "awful", "fine", "poor", "nice", "dull"]


def _write_tsv(path, rows):
    path.write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in rows))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    rows = [(f"{WORDS[i % 8]} movie {WORDS[(3 * i) % 8]} plot", "pos" if i % 2 else "neg") for i in range(140)]
    _write_tsv(d / "train.tsv", rows[:120])
    _write_tsv(d / "dev.tsv", rows[120:])
    return d


def _argv(files, out, *extra):
    return ["train", "--model", "switch_transformers", "--train-file", str(files / "train.tsv"), "--validation-file", str(files / "dev.tsv"),
            "--public-size", "20", "--set", "model.vocab_size=60", "--max-length", "12", "--set", "model.hidden_size=16",
            "--set", "performance.micro_batch_size=16", "--steps", "2", "--seed", "0", "--output-dir", str(out), "--no-progress",
            *extra]


@pytest.fixture(scope="module")
def finished(files, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "run"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(_argv(files, out)) == 0
    return out, buf.getvalue()


def test_small_data_defaults_are_chosen_and_printed_first(finished):
    out, printed = finished
    first = printed.splitlines()[0]
    assert first.startswith("raptor train: raptor, task classification (inferred") and ", epsilon 8, " in first
    assert "batch size 10 (default N/10)" in first and "lr 0.003 (default for this model kind)" in first
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["batch_size"] == 10 and res["config"]["optim"]["lr"] == 0.003
    assert res["defaults"] == {"batch_size": True, "lr": True}


def test_the_final_model_is_a_usable_save_pretrained_directory(finished, files, tmp_path):
    out, _ = finished
    model_dir = out / "model"
    config = json.loads((model_dir / "config.json").read_text())
    assert config["id2label"] == {"0": "neg", "1": "pos"}
    assert json.loads((model_dir / "raptor_labels.json").read_text()) == {"label_names": ["neg", "pos"], "max_length": 12}
    assert (model_dir / "tokenizer.json").is_file()
    res = json.loads((out / "results.json").read_text())
    assert res["label_map"] == {"0": "neg", "1": "pos"}

    # raptor predict reproduces the run's own dev accuracy (the evaluator's path vs the predict path)
    pred = tmp_path / "p.csv"
    assert main(["predict", "--model", str(out), "--input", str(files / "dev.tsv"), "--output", str(pred),
                 "--no-progress"]) == 0  # the run's max length by default
    rows = list(csv.DictReader(pred.open()))
    truth = [line.split("\t")[1].strip() for line in (files / "dev.tsv").read_text().splitlines()[1:]]
    assert len(rows) == len(truth) == 20 and {r["prediction"] for r in rows} <= {"neg", "pos"}
    assert [int(r["line"]) for r in rows] == list(range(2, 22))
    assert all(abs(float(r["p_neg"]) + float(r["p_pos"]) - 1) < 1e-4 for r in rows)
    accuracy = sum(r["prediction"] == t for r, t in zip(rows, truth)) / len(truth)
    assert accuracy == pytest.approx(res["final_metrics"]["accuracy"])
    jsonl = tmp_path / "p.jsonl"
    assert main(["predict", "--model", str(out / "model"), "--input", str(files / "dev.tsv"), "--output", str(jsonl),
                 "--max-length", "12", "--no-progress"]) == 0
    assert [json.loads(x)["prediction"] for x in jsonl.read_text().splitlines()] == [r["prediction"] for r in rows]


def test_an_output_dir_holding_a_run_is_refused_before_training_unless_overwrite(finished, files, capsys):
    out, _ = finished
    before = (out / "results.json").read_text()
    assert main(_argv(files, out)) == 2
    err = capsys.readouterr().err
    assert "already holds a run" in err and "--overwrite" in err
    assert (out / "results.json").read_text() == before  # nothing was touched
    assert main(_argv(files, out, "--overwrite")) == 0


def test_a_budget_stop_saves_the_checkpoint_results_and_model_first(files, tmp_path, capsys, budget_runs_out):
    budget_runs_out(1)
    out = tmp_path / "run"
    assert main(_argv(files, out)) == 2
    err = capsys.readouterr().err
    assert "would exceed the privacy budget (test)" in err and "before stopping" in err
    res = json.loads((out / "results.json").read_text())
    assert res["steps"] == 1 and "exceed" in res["stopped_by_budget"]
    assert json.loads((out / "checkpoint" / "state.json").read_text())["step"] == 1
    assert (out / "model" / "config.json").is_file()


def test_every_train_flag_shows_its_default():
    import argparse

    from raptor.cli.train import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    missing = [a.option_strings for a in parser._actions if a.dest != "help" and "default" not in (a.help or "")]
    assert not missing


def test_help_and_argument_errors_import_no_heavy_module():
    """``raptor --help``, ``raptor train --help`` and an argument error parse without importing
    torch, transformers or dp_accounting (issue 15 item 11; the time is measured in the report)."""
    import subprocess
    import sys

    code = ("import sys\nfrom raptor.cli.main import main\n"
            "for argv in (['--help'], ['train', '--help'], ['train', '--epsilon', 'x']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in ('torch', 'transformers', 'dp_accounting', 'tokenizers', 'datasets') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env={**__import__("os").environ, "PYTHONPATH": __import__("os").pathsep.join(sys.path)})
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr
