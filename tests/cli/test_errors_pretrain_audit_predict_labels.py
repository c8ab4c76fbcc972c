"""The Python API, pretraining and the audits at the standard ``raptor train`` meets: each case is a
clear one-line refusal or the right result (not lost data, a silently wrong run, a traceback, a hang
or a misleading message):

* ``raptor pretrain``, ``raptor audit`` and ``raptor predict`` take the output lock and never write
  over another run's files or a saved model;
* label words go to the labels they name; labels of mixed types, NaN labels and labels of
  validation records that are not training classes are refused naming the record; the label ->
  id -> word map is printed at the start and saved in results.json;
* count and size arguments are bounded (``--releases``, ``--sigma``, ``--seed``, ``max_length``...).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from bad_input_files import TINY, one_error_line, run_cli, tsv

import raptor
from raptor.errors import ConfigError, DataError

WORDS = ["good", "bad", "great", "awful", "fine", "poor"]
ROWS = [{"sentence": f"{WORDS[i % 6]} film {WORDS[(i * 5) % 6]}", "label": int(WORDS[i % 6] in ("good", "great", "fine"))}
        for i in range(40)]
#: sentences that hold the label words yes / no (the tiny tokenizer learns them from the public slice)
YES_NO = [(f"{w} yes movie no plot", "yes" if i % 2 else "no") for i, w in enumerate(WORDS * 10)]


def _snapshot(directory: Path) -> dict:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- data loss: one writer, never over another run

def _public_text(d: Path, paragraphs: int = 60) -> Path:
    text = d / "public"
    text.mkdir(parents=True, exist_ok=True)
    (text / "a.txt").write_text("".join(f"paragraph {i} of public text about {WORDS[i % 6]} films\n"
                                        for i in range(paragraphs)))
    return text


PRETRAIN_TINY = ["--vocab-size", "120", "--hidden-size", "16", "--num-layers", "2", "--num-heads", "2",
                 "--num-experts", "4", "--expert-intermediate", "16", "--block-length", "16", "--batch-size", "4",
                 "--steps", "2", "--warmup-steps", "1", "--eval-every", "2", "--eval-blocks", "4",
                 "--checkpoint-every", "2", "--held-out-every", "3", "--stats-records", "8", "--no-progress"]


def _pretrain(text, out, *extra):
    return ["pretrain", "--text", text, "--output-dir", out, *PRETRAIN_TINY, *extra]


def _a_model_dir(d: Path) -> Path:
    """What a train run leaves: results.json, checkpoint/ and model/ (a saved model's files)."""
    run = d / "run"
    (run / "model").mkdir(parents=True)
    (run / "checkpoint").mkdir()
    (run / "results.json").write_text('{"final_metrics": {"accuracy": 0.9}}')
    (run / "model" / "config.json").write_text('{"model_type": "olmoe"}')
    (run / "model" / "model.safetensors").write_bytes(b"fine-tuned weights")
    (run / "model" / "tokenizer.json").write_text("{}")
    return run


@pytest.mark.parametrize("where", ["model", "run"], ids=["a fine-tuned model/", "a train run's directory"])
def test_pretrain_never_writes_over_a_model_or_a_run(where, tmp_path, capsys):
    run = _a_model_dir(tmp_path)
    target = run / "model" if where == "model" else run
    before = _snapshot(run)
    rc, _, err = run_cli(_pretrain(_public_text(tmp_path), target), capsys)
    one_error_line(rc, err, r"raptor pretrain: error: --output-dir .*: already holds files that raptor pretrain "
                             r"does not write \(.*\).*choose a new or empty --output-dir")
    assert _snapshot(run) == before  # before: config.json, model.safetensors and the tokenizer were replaced


def test_audit_never_writes_into_a_train_run(tmp_path, capsys):
    run = _a_model_dir(tmp_path)
    before = _snapshot(run)
    rc, _, err = run_cli(["audit", "mechanism", "--releases", "100", "--output-dir", run], capsys)
    one_error_line(rc, err, r"raptor audit: error: --output-dir .*: already holds files that raptor audit does not "
                             r"write \(checkpoint, model, results.json\)")
    assert _snapshot(run) == before


_HOLD = ("import sys, time\nfrom raptor.cli.run_lock import lock_output_dir\nlock_output_dir(sys.argv[1])\n"
         "print('locked', flush=True)\ntime.sleep(120)\n")


@pytest.mark.parametrize("command", ["pretrain", "audit", "predict"])
def test_a_second_writer_of_one_directory_is_refused(command, tmp_path, finished_run, capsys):
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        (tmp_path / "in.tsv").write_text(tsv([("good movie", 1), ("bad movie", 0)]))
        argv = {"pretrain": _pretrain(_public_text(tmp_path), out),
                "audit": ["audit", "mechanism", "--releases", "100", "--output-dir", out],
                "predict": ["predict", "--model", finished_run, "--input", tmp_path / "in.tsv", "--output",
                            out / "p.csv", "--no-progress"]}[command]
        rc, _, err = run_cli(argv, capsys)
        flag = "--output" if command == "predict" else "--output-dir"
        one_error_line(rc, err, rf"raptor {command}: error: {flag} .*out: another raptor run \(pid {holder.pid} on "
                                 r".*\) is writing there now")
    finally:
        holder.kill()
        holder.wait(timeout=60)


def test_predict_does_not_replace_an_existing_output_without_overwrite(tmp_path, finished_run, capsys):
    import transformers

    (tmp_path / "in.tsv").write_text(tsv([("good movie", 1), ("bad movie", 0)]))
    out = tmp_path / "p.csv"
    out.write_text("earlier predictions\n")
    argv = ["predict", "--model", finished_run, "--input", tmp_path / "in.tsv", "--output", out, "--no-progress"]
    rc, _, err = run_cli(argv, capsys)
    one_error_line(rc, err, r"--output .*p.csv: already exists; pass --overwrite to replace it")
    assert out.read_text() == "earlier predictions\n"
    transformers.utils.logging.enable_progress_bar()
    try:
        rc, stdout, _ = run_cli([*argv, "--overwrite"], capsys)
        assert rc == 0 and "2 predictions written" in stdout
        assert out.read_text().startswith("line,prediction")
        assert not transformers.utils.logging.is_progress_bar_enabled()  # before: "Loading weights" was shown
    finally:
        transformers.utils.logging.enable_progress_bar()


def test_an_output_dir_that_cannot_be_created_is_one_line(tmp_path, capsys, finished_run):
    (tmp_path / "train.tsv").write_text(tsv([(r["sentence"], r["label"]) for r in ROWS]))
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "missing-target")
    train = ["train", "--model", "switch_transformers", *TINY, "--train-file", tmp_path / "train.tsv", "--public-size", "20"]
    rc, _, err = run_cli([*train, "--output-dir", dangling], capsys)
    one_error_line(rc, err, r"--output-dir .*dangling: is a symbolic link to a missing target")
    rc, _, err = run_cli([*train, "--output-dir", "/proc/raptor-out/run"], capsys)  # before: mkdir's traceback
    one_error_line(rc, err, r"--output-dir /proc/raptor-out/run: (cannot be used as an output directory|.* is not "
                             r"writable)")


def test_a_pretrain_run_copied_elsewhere_resumes_there(tmp_path):
    from raptor.pretrain import PretrainConfig, pretrain

    cfg = PretrainConfig(output_dir=str(tmp_path / "a"), text=(str(_public_text(tmp_path)),), vocab_size=120,
                         hidden_size=16, num_layers=2, num_heads=2, num_experts=4, expert_intermediate=16,
                         block_length=16, batch_size=4, steps=4, warmup_steps=1, eval_every=2, eval_blocks=4,
                         checkpoint_every=2, held_out_every=3, stats_records=8, seed=0)
    assert pretrain(cfg, progress=False, stop_after=2) is None
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    result = pretrain(replace(cfg, output_dir=str(tmp_path / "b")), resume=True, progress=False)
    assert result.report["steps"] == 4  # before: "started with different settings (output_dir)"


def test_an_empty_held_out_split_is_named(tmp_path):
    from raptor.pretrain import PretrainConfig, pretrain

    cfg = PretrainConfig(output_dir=str(tmp_path / "a"), text=(str(_public_text(tmp_path, 360)),), vocab_size=120,
                         hidden_size=16, num_layers=2, num_heads=2, num_experts=4, expert_intermediate=16,
                         block_length=16, batch_size=4, steps=2, held_out_every=50, stats_records=8)
    with pytest.raises(DataError, match=r"^--held-out-every 50: no paragraph is held out.*18 group\(s\) of 20 "
                                        r"paragraphs.*give --held-out-every 35 or less"):
        pretrain(cfg, progress=False)  # before: "the public text gives 0 tokens"


# ---------------------------------------------------------------- flags of pretrain, audit, check, inspect, train

def _flag_cases(tmp_path: Path, *, write: bool = True):
    text = _public_text(tmp_path) if write else tmp_path
    if write:
        (tmp_path / "train.tsv").write_text(tsv([(r["sentence"], r["label"]) for r in ROWS]))
        (tmp_path / "three.tsv").write_text(tsv([(r["sentence"], i % 3) for i, r in enumerate(ROWS)]))
    out = tmp_path / "out"
    train = ["train", "--model", "switch_transformers", *TINY, "--train-file", tmp_path / "train.tsv", "--public-size", "20", "--output-dir", out]
    return {
        "pretrain --min-lr-ratio 5": (_pretrain(text, out, "--min-lr-ratio", "5"),
                                      r"--min-lr-ratio is the final lr as a fraction of --lr, so it must lie in \[0, 1\]"),
        "pretrain --text a table": (_pretrain(tmp_path / "train.tsv", out),
                                    r"--text .*train.tsv: is a table \(.tsv\), but pre-training reads plain text"),
        "pretrain --seed 2**70": (_pretrain(text, out, "--seed", str(2**70)),
                                  r"--seed must be an integer in \[0, 2\*\*63\)"),
        "pretrain --steps 1e12": (_pretrain(text, out, "--steps", str(10**12)), r"--steps must be an integer <= "),
        "pretrain --tokenizer not a dir": (_pretrain(text, out, "--tokenizer", "NOT_A_DIR"),
                                           r"--tokenizer NOT_A_DIR: no such directory or file"),
        # docs/ERRORS.md: each is refused before anything runs
        "pretrain --glue-public-size nan": (_pretrain(text, out, "--glue-public-size", "nan"),
                                            r"--glue-public-size must be a finite number, got nan"),
        "pretrain --threads 100000": (_pretrain(text, out, "--threads", "100000"),
                                      r"--threads must be an integer <= 4,096"),
        "pretrain --block-length 100000": (_pretrain(text, out, "--block-length", "100000"),
                                           r"--block-length must be an integer <= 4,096"),
        "pretrain --vocab-size 1e9": (_pretrain(text, out, "--vocab-size", str(10**9)),
                                      r"--vocab-size must be an integer <= 1,000,000"),
        "pretrain --weight-decay inf": (_pretrain(text, out, "--weight-decay", "inf"),
                                        r"--weight-decay must be a finite number, got inf"),
        "audit one-run --audit-seed 2**64": (["audit", "one-run", "--audit-seed", str(2**64), "--output-dir", out],
                                             r"--audit-seed must be an integer in \[0, 2\*\*63\)"),
        "audit one-run --canaries 1e9": (["audit", "one-run", "--canaries", str(10**9), "--output-dir", out],
                                         r"--canaries must be an integer <= 10,000,000"),
        "check --batch-size 1e6": (["check", "olmoe", "--batch-size", str(10**6)], r"--batch-size must be an integer <= 1,024"),
        "check --seed -1": (["check", "olmoe", "--seed", "-1"], r"--seed must be an integer in \[0, 2\*\*63\)"),
        "check --seed 2**64": (["check", "olmoe", "--seed", str(2**64)], r"--seed must be an integer in \[0, 2\*\*63\)"),
        "check --tolerance inf": (["check", "olmoe", "--tolerance", "inf"], r"--tolerance must be a positive finite"),
        "check --device tpu": (["check", "olmoe", "--device", "tpu"], r"--device 'tpu' is not a device name"),
        "audit --sigma 1e-6": (["audit", "mechanism", "--sigma", "1e-6", "--releases", "200", "--output-dir", out],
                               r"--sigma must be a finite number >= 0.05"),
        "audit --releases 1e9": (["audit", "mechanism", "--releases", "1000000000", "--output-dir", out],
                                 r"--releases must be an integer <= 2,000,000"),
        "audit --seed -1": (["audit", "mechanism", "--seed", "-1", "--output-dir", out],
                            r"--seed must be an integer in \[0, 2\*\*63\)"),
        "audit one-run --canaries 0": (["audit", "one-run", "--canaries", "0", "--output-dir", out],
                                       r"--canaries must be an integer >= 1"),
        "check --tolerance nan": (["check", "olmoe", "--tolerance", "nan"],
                                  r"--tolerance must be a positive finite relative error"),
        "check --tolerance -1": (["check", "olmoe", "--tolerance", "-1"],
                                 r"--tolerance must be a positive finite relative error"),
        "check --seq-len 1e6": (["check", "olmoe", "--seq-len", "1000000"], r"--seq-len must be an integer <= 4,096"),
        "inspect --count 99": (["inspect", "--model", "switch_transformers", "--vocab-size", "60", "--max-length", "12", "--train-file", tmp_path / "train.tsv", "--public-size", "20",
                                "--count", "99"], r"--count 99: the model has only \d+ MoE layers"),
        "train --freeze-shared-experts on a classifier": (
            [*train, "--model", "qwen2_moe", "--method", "dpsgd-full", "--set", "run.freeze_shared_experts=true"],
            r"--set run.freeze_shared_experts applies to --objective generate"),
        "train --metric f1 on 3 classes": (
            ["train", "--model", "switch_transformers", *TINY, "--train-file", tmp_path / "three.tsv", "--public-size", "20", "--output-dir", out,
             "--set", "run.metric=f1"], r"--set run.metric=f1 is the binary F1 of label id 1, but the train labels have 3 classes"),
    }


FLAG_CASES = list(_flag_cases(Path("unused"), write=False))


@pytest.mark.parametrize("case", FLAG_CASES)
def test_a_bad_flag_is_one_line(case, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv, pattern = _flag_cases(tmp_path)[case]
    started = time.perf_counter()
    rc, _, err = run_cli(argv, capsys)
    one_error_line(rc, err, pattern)
    assert time.perf_counter() - started < 60  # before: the audits ran for hours, or the hub retried for 49 s
    assert not (tmp_path / "out" / "model").exists() and not (tmp_path / "out" / "results.json").exists()


def test_check_on_a_device_this_machine_lacks_is_one_line(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    rc, _, err = run_cli(["check", "olmoe", "--device", "cuda"], capsys)
    one_error_line(rc, err, r"--device cuda: CUDA is not available on this machine")  # before: AssertionError


def test_the_seed_of_a_library_run_is_bounded():
    with pytest.raises(ConfigError, match=r"seed.*\[0, 2\*\*63\)"):
        raptor.TrainConfig(seed=2**70, privacy=raptor.PrivacyConfig(secure_rng=False))


# ---------------------------------------------------------------- label words and the label map

@pytest.fixture(scope="module")
def yes_no_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("yesno")
    (d / "train.tsv").write_text(tsv(YES_NO))
    return d


def _label_word_run(d, out, *words):
    return ["train", "--model", "switch_transformers", *TINY, "--train-file", d / "train.tsv", "--public-size", "20", "--output-dir", out,
            "--set", "model.head_init=label-words", "--set", "model.label_words=" + ",".join(words)]


def test_label_words_that_are_the_label_names_go_to_those_labels(yes_no_dir, tmp_path, capsys):
    rc, out, err = run_cli(_label_word_run(yes_no_dir, tmp_path / "out", "yes", "no"), capsys)
    assert rc == 0, err
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    # label ids are sorted (no = 0, yes = 1); before: "yes" initialised the row of "no", and the other way round
    assert results["head_init"]["label_words"] == ["no", "yes"]
    assert results["labels"] == [{"label": "no", "id": 0, "word": "no"}, {"label": "yes", "id": 1, "word": "yes"}]
    assert "labels (label -> id -> word): 'no' -> 0 -> 'no', 'yes' -> 1 -> 'yes'" in out


def test_a_label_word_that_names_another_label_is_refused(yes_no_dir, tmp_path, capsys):
    rc, _, err = run_cli(_label_word_run(yes_no_dir, tmp_path / "out", "yes", "movie"), capsys)
    one_error_line(rc, err, r"--set model.label_words: the word 'yes' is the name of label 1 but would initialise label 0 "
                             r"\('no'\)")


def test_label_words_the_tokenizer_does_not_know_are_refused(yes_no_dir, tmp_path, capsys):
    rc, _, err = run_cli(_label_word_run(yes_no_dir, tmp_path / "out", "zzqx", "qqzx"), capsys)
    one_error_line(rc, err, r"--set model.label_words: 'zzqx' and 'qqzx' are both the unknown token in this tokenizer, so their "
                             r"head rows would be identical")  # before: every prediction class 0, blamed on --lr


def test_every_train_run_prints_and_saves_its_label_map(finished_run):
    results = json.loads((finished_run / "results.json").read_text())
    assert results["labels"] == [{"label": "0", "id": 0, "word": None}, {"label": "1", "id": 1, "word": None}]


# ---------------------------------------------------------------- raptor.fine_tune

@pytest.fixture(scope="module")
def tok():
    from raptor.data import train_wordpiece

    return train_wordpiece([r["sentence"] for r in ROWS], vocab_size=40)


def _model(tok, *, num_labels=2, **size):
    from raptor.moe.models import TinySize, build_model

    return build_model("olmoe", generator=torch.Generator().manual_seed(0), num_labels=num_labels,
                       size=TinySize(vocab_size=len(tok), hidden_size=16, **size))


def _call(tok, tmp_path, *, train=ROWS[:30], validation=ROWS[30:], num_labels=2, config=None, **kw):
    config = config or raptor.tiny_recipe("dpsgd", steps=1, output_dir=str(tmp_path / "run"))
    kw.setdefault("public", ROWS[30:])
    return raptor.fine_tune(_model(tok, num_labels=num_labels), tok, train, validation, config, progress=False, **kw)


def _labels(values):
    return [dict(r, label=v) for r, v in zip(ROWS[:30], values)]


def _qa():
    from raptor.data.qa import QAData

    return QAData(prompts=("q1", "q2"), answers=("a1", "a2"))


LIBRARY = [
    ("int labels 1/2 and one 'x'", {"train": _labels([1, 2] * 14 + [1, "x"]), "num_labels": 3}, DataError,
     r"^train: record 29: label 'x' is a string, but record 0's label 1 is a number; labels must be of one type"),
    ("a NaN float label", {"train": _labels([0.0, 1.0] * 14 + [0.0, float("nan")])}, DataError,
     r"^train: record 29: label nan is not a finite number"),
    ("validation pos/neg against train 0/1", {"validation": [dict(r, label="pos") for r in ROWS[30:]]}, DataError,
     r"^validation dev: record 0: label 'pos' is not a class of the training labels \['0', '1'\]"),
    ("text_columns holds the label column", {"text_columns": ["sentence", "label"]}, ConfigError,
     r"^text_columns \['sentence', 'label'\] holds the label_column 'label'"),
    ("prompt/answer dicts", {"train": [{"prompt": "q", "answer": "a"}] * 30, "validation": None, "public": None},
     DataError, r"^train: the records hold prompt/answer pairs.*raptor.data.qa.QAData"),
    ("QA validation for classification records", {"validation": _qa()}, ConfigError,
     r"^validation= holds QAData but train= holds classification records"),
    ("classification validation for QA records", {"train": _qa(), "validation": ROWS[30:], "public": None},
     ConfigError, r"^validation= holds classification records but train= holds QAData"),
    ("max_length 100000", {"config": lambda p: raptor.tiny_recipe("dpsgd", steps=1, output_dir=str(p / "run"),
                                                                   max_length=100_000)},
     ConfigError, r"^config.max_length 100000 is above the model's 256 positions"),
    ("metrics f1 on 3 classes", {"train": _labels([0, 1, 2] * 10), "num_labels": 3, "validation": None,
                                 "metrics": ["f1"]}, ConfigError, r"^metrics: f1 is the binary F1 of label id 1"),
    ("a negative class id", {"train": _labels([0, 1] * 14 + [0, -1])}, DataError,
     r"^train: record 29: label -1 is a negative class id"),
    ("a list as a label", {"train": _labels([0, 1] * 14 + [0, [1]])}, DataError,
     r"^train: record 29: label \[1\] is a number, but|^train: record 29: label \[1\] is a list"),
]


@pytest.mark.parametrize("kwargs,error,pattern", [c[1:] for c in LIBRARY], ids=[c[0] for c in LIBRARY])
def test_fine_tune_bad_labels_and_arguments(kwargs, error, pattern, tok, tmp_path):
    kwargs = {k: v(tmp_path) if callable(v) else v for k, v in kwargs.items()}
    with pytest.raises(error) as info:
        _call(tok, tmp_path, **kwargs)
    assert re.search(pattern, str(info.value)), str(info.value)
    assert not (tmp_path / "run").exists()


def test_ints_and_whole_floats_are_one_label_each(tok, tmp_path, capsys):
    out = _call(tok, tmp_path, train=_labels([0, 1, 0.0, 1.0] * 7 + [0, 1]), verbose=True)
    # before: int 1 was stored as class '0.0' in the map {0: '0', 1: '1', 2: '0.0', 3: '1.0'}
    assert out.results["label_map"] == {"0": "0", "1": "1"}
    assert out.results["labels"] == [{"label": "0", "id": 0, "word": None}, {"label": "1", "id": 1, "word": None}]
    assert "raptor: labels (label -> id): '0' -> 0, '1' -> 1" in capsys.readouterr().out


def test_fine_tune_prints_nothing_unless_asked(tok, tmp_path, capsys):
    """The library speaks through its results and warnings: no label map, no line on stdout or
    stderr, unless verbose=True."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a tiny run may warn that it is below the majority class
        _call(tok, tmp_path)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "", captured


def test_string_labels_are_named_in_the_map(tok, tmp_path):
    out = _call(tok, tmp_path, train=_labels(["pos", "neg"] * 15),
                validation=[dict(r, label="pos" if r["label"] else "neg") for r in ROWS[30:]],
                public=[dict(r, label="pos") for r in ROWS[30:]])
    assert out.results["labels"] == [{"label": "neg", "id": 0, "word": None}, {"label": "pos", "id": 1, "word": None}]


# ---------------------------------------------------------------- records and configs

def _rows(values):
    return [{"sentence": "a b", "label": v} for v in values]


RECORDS = [
    ("string label 'nan'", {"rows": _rows(["x", "nan"])}, r"record 1: label 'nan' is not a finite number"),
    ("a dict as a label", {"rows": _rows([0, {"y": 1}])}, r"record 1: label \{'y': 1\} is a dict, but record 0's"),
    ("bytes labels", {"rows": _rows([b"x", b"y"])}, r"record 0: label b'x' is a bytes; a label must be"),
    ("one fractional label among 20 whole ones", {"rows": _rows([0, 1] * 10 + [0.5])},
     r"record 20: label 0.5 is fractional while 20 of the 21 labels are whole numbers"),
    ("an infinite regression score", {"rows": _rows([0.5, math.inf]), "task_type": "regression"},
     r"record 1: label inf is not a finite number"),
]


@pytest.mark.parametrize("kwargs,pattern", [c[1:] for c in RECORDS], ids=[c[0] for c in RECORDS])
def test_a_bad_record_label_is_named(kwargs, pattern):
    from raptor.data.loaders import from_records

    kwargs = dict(kwargs)
    with pytest.raises(DataError, match=pattern):
        from_records(kwargs.pop("rows"), **kwargs)


def test_labels_are_one_class_per_name_as_in_files():
    from raptor.data.loaders import from_records

    assert from_records(_rows(["1", "1.0", "2", "2"])).label_names == ("1", "2")  # before: '1' and '1.0'
    # a validation split's integers name the training classes '1', '2' (before: "label id 2 is outside range")
    assert from_records(_rows([1, 2]), label_names=("1", "2")).labels == (0, 1)


@pytest.mark.parametrize("kwargs", [{"seed": True}, {"max_length": True}, {"seed": 2**63}],
                         ids=["seed True", "max_length True", "seed 2**63"])
def test_a_config_of_the_wrong_type_or_range_is_refused(kwargs):
    with pytest.raises(ConfigError, match=r"^TrainConfig\.(seed|max_length) must be"):
        raptor.TrainConfig(**kwargs, privacy=raptor.PrivacyConfig(secure_rng="seed" not in kwargs))


def test_an_empty_label_column_is_named(tok, tmp_path):
    with pytest.raises(ConfigError, match=r"^label_column must be a column name \(a non-empty string\), got ''"):
        _call(tok, tmp_path, label_column="")  # before: "record 0 lacks ''"


def test_a_validation_file_identical_to_the_training_file_is_warned(tmp_path, recwarn):
    from raptor.data.loaders import DataSource, load_splits
    from raptor.errors import DataWarning

    rows = "sentence\tlabel\n" + "".join(f"good film {i}\t1\nbad film {i}\t0\n" for i in range(10))
    (tmp_path / "train.tsv").write_text(rows)
    (tmp_path / "copy.tsv").write_text(rows)
    load_splits(DataSource(train_file=str(tmp_path / "train.tsv"), validation_file=str(tmp_path / "copy.tsv")))
    assert any(issubclass(w.category, DataWarning) and "memorisation" in str(w.message) for w in recwarn)
    recwarn.clear()
    (tmp_path / "dev.tsv").write_text(rows.replace("film", "movie"))
    load_splits(DataSource(train_file=str(tmp_path / "train.tsv"), validation_file=str(tmp_path / "dev.tsv")))
    assert not any("memorisation" in str(w.message) for w in recwarn)


def test_a_final_accuracy_below_the_majority_class_is_warned(capsys):
    import torch

    from raptor.moe.models import build_model
    from raptor.recipes import tiny_recipe
    from raptor.training.run.assemble import build_trainer

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 500, (40, 6), generator=g)
    data = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.zeros(40, dtype=torch.long)}
    dev = {k: v[:10].clone() for k, v in data.items()}
    dev["labels"] = torch.tensor([0] * 6 + [1] * 4)  # majority 0.6
    model = build_model("switch_transformers", generator=g)
    trainer = build_trainer(tiny_recipe("nonprivate", steps=1, batch_size=8), model, train=data, validation=dev,
                            public=data)
    trainer.evaluate = lambda: {"metrics": {"accuracy": 0.5}, "main_metric": "accuracy", "dev_loss": 0.7,
                                "accuracy": 0.5, "single_class": None, "majority_class_accuracy": 0.6}
    from raptor.errors import RaptorWarning

    with pytest.warns(RaptorWarning, match="below the majority class's share 0.6000"):
        trainer.fit(progress=False)


def test_a_failed_checkpoint_write_leaves_no_tmp_directory(tmp_path, monkeypatch):
    import errno

    import torch

    from raptor.training.saving import checkpoint as ckpt

    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt.torch, "save", full_disk)
    with pytest.raises(OSError, match="No space left"):
        ckpt.save_checkpoint(tmp_path / "checkpoint", model=model, optimizers={"shared": opt}, ledger={},
                             generators={"sample": torch.Generator()}, secure_rng=False, step=1, config={})
    assert not (tmp_path / "checkpoint.tmp").exists() and not (tmp_path / "checkpoint").exists()
