"""``raptor predict`` on a damaged or partial run directory: one ``raptor predict: error:`` line that
names the file and what to do. Swept on a minilm-moe run (docs/ERRORS.md, ``raptor predict``); the
files at fault are the run's own (raptor_labels.json, model/), not the model's, so the tests use a
one-step tiny Switch run to stay fast. Each case failed on the code before it: a label map of
another size predicted with the wrong names (or raised IndexError), a list as the map gave a Python
message, a truncated map said nothing of what to do, and a run without model/ was "no model here"."""

from __future__ import annotations

import json
import shutil

import pytest
from bad_input_files import GOOD_TSV, one_error_line, run_cli


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("predict_run")
    (d / "train.tsv").write_text(GOOD_TSV)
    from raptor.cli.main import main

    assert main(["train", "--model", "switch_transformers", "--train-file", str(d / "train.tsv"), "--public-size",
                 "20", "--output-dir", str(d / "out"), "--steps", "1", "--seed", "0", "--max-length", "12",
                 "--batch-size", "8", "--no-progress"]) == 0
    (d / "in.tsv").write_text("sentence\ngood film\nbad plot\n")
    return d


def _copy(run_dir, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(run_dir / "out", out)
    return out


def _predict(run, run_dir, tmp_path, capsys):
    return run_cli(["predict", "--model", run, "--input", run_dir / "in.tsv", "--output", tmp_path / "p.csv",
                    "--no-progress"], capsys)


def _labels(run):
    return run / "model" / "raptor_labels.json"


def test_a_truncated_label_map_says_what_to_do(run_dir, tmp_path, capsys):
    run = _copy(run_dir, tmp_path)
    _labels(run).write_text('{"label_names": ["0"')
    rc, _, err = _predict(run, run_dir, tmp_path, capsys)
    one_error_line(rc, err, r"raptor_labels.json: corrupt label map \(not valid JSON: .*\); the model directory is "
                            r"damaged: restore raptor_labels.json from a copy of the run, or train the model again")


def test_a_label_map_that_is_a_list_is_named_as_such(run_dir, tmp_path, capsys):
    run = _copy(run_dir, tmp_path)
    _labels(run).write_text("[1, 2]\n")
    rc, _, err = _predict(run, run_dir, tmp_path, capsys)
    one_error_line(rc, err, r"raptor_labels.json: corrupt label map \(a JSON list, expected an object with "
                            r"label_names\); the model directory is damaged")


@pytest.mark.parametrize("names, have", [(["a", "b", "c"], "3 label names"),
                                         ([], r"no label names \(a regression head\)")])
def test_a_label_map_of_another_size_than_the_head_is_refused(run_dir, tmp_path, capsys, names, have):
    run = _copy(run_dir, tmp_path)
    meta = json.loads(_labels(run).read_text())
    _labels(run).write_text(json.dumps(dict(meta, label_names=names)))
    rc, _, err = _predict(run, run_dir, tmp_path, capsys)
    one_error_line(rc, err, rf"raptor_labels.json: {have}, but the model's head has 2 outputs \(config.json "
                            r"num_labels\); the label map is not this model's")
    assert not (tmp_path / "p.csv").exists()


def test_a_run_without_its_model_dir_is_named_as_a_run(run_dir, tmp_path, capsys):
    run = _copy(run_dir, tmp_path)
    shutil.rmtree(run / "model")
    rc, _, err = _predict(run, run_dir, tmp_path, capsys)
    one_error_line(rc, err, r"--model .*run: a raptor train run without its model \(no model/config.json\); .*"
                            r"train again")


def test_the_run_itself_still_predicts(run_dir, tmp_path, capsys):
    rc, out, err = _predict(run_dir / "out", run_dir, tmp_path, capsys)
    assert rc == 0, err
    assert (tmp_path / "p.csv").read_text().count("\n") == 3
