"""Bad inputs of ``raptor.fine_tune``, of concurrent runs and of old checkpoints: each is a clear
refusal (not a traceback, a silent wrong run, a misleading or remedy-less message):

* ``raptor.fine_tune`` from Python with bad arguments: a :class:`~raptor.errors.ConfigError`
  naming the argument (a :class:`~raptor.errors.DataError` naming the record for bad record contents);
* two ``raptor train`` runs on one ``--output-dir``: the second is refused while the first runs,
  and a lock left by a killed run does not block;
* a checkpoint from another raptor version (older format, missing fields): exit 2, one line naming
  the checkpoint's ``state.json`` and what to do;
* ``--output-dir ""`` for ``demo`` and ``audit``; a budget stop's results carry the dev metrics of
  the model as saved.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
import torch
from bad_input_files import one_error_line, run_cli

import raptor
from raptor.cli.main import main
from raptor.errors import ConfigError, DataError, UnsupportedModelError

WORDS = ["good", "bad", "great", "awful", "fine", "poor"]
ROWS = [{"sentence": f"{WORDS[i % 6]} film {WORDS[(i * 5) % 6]}", "label": int(WORDS[i % 6] in ("good", "great", "fine"))}
        for i in range(40)]
TSV = "sentence\tlabel\n" + "".join(f"{r['sentence']}\t{r['label']}\n" for r in ROWS + ROWS[:20])
DEV_TSV = "sentence\tlabel\n" + "".join(f"{r['sentence']}\t{r['label']}\n" for r in ROWS[20:])
TINY = ["--model", "switch_transformers", "--set", "model.vocab_size=60", "--max-length", "12", "--set", "model.hidden_size=16",
        "--set", "performance.micro_batch_size=8",
        "--no-progress", "--steps", "1", "--seed", "1", "--batch-size", "8", "--epsilon", "4"]


# ---------------------------------------------------------------- raptor.fine_tune from Python

@pytest.fixture(scope="module")
def tok():
    from raptor.data import train_wordpiece

    return train_wordpiece([r["sentence"] for r in ROWS], vocab_size=40)


def _model(tok, *, num_labels=2, vocab=None):
    from raptor.moe.models import TinySize, build_model

    return build_model("olmoe", generator=torch.Generator().manual_seed(0), num_labels=num_labels,
                       size=TinySize(vocab_size=vocab or len(tok), hidden_size=16))


class _DatasetLike:
    """What ``raptor.fine_tune`` reads of a ``datasets.Dataset`` (not installed here): rows and column names."""

    def __init__(self, rows):
        self.rows, self.column_names = rows, list(rows[0])

    def __iter__(self):
        return iter(self.rows)

    def __len__(self):
        return len(self.rows)


def _call(tok, tmp_path, *, model="tiny", tokenizer="tok", train=ROWS[:30], validation=ROWS[30:], config=None, **kw):
    config = config or raptor.tiny_recipe("dpsgd", steps=1, output_dir=str(tmp_path / "run"))
    kw.setdefault("public", ROWS[30:])
    return raptor.fine_tune(_model(tok) if model == "tiny" else model, tok if tokenizer == "tok" else tokenizer,
                            train, validation, config, progress=False, **kw)


def _cfg(tmp_path, **kw):
    return raptor.tiny_recipe("dpsgd", **{"steps": 1, "output_dir": str(tmp_path / "run"), **kw})


# (id, keyword arguments of _call (callables get tok and tmp_path), error class, message regex)
LIBRARY = [
    ("model is None with a tokenizer", {"model": None}, ConfigError,
     r"^fine_tune: model='minilm-moe' is loaded by name with its own tokenizer; pass tokenizer=None"),
    ("model is a tiny family's name", {"model": "olmoe"}, ConfigError,
     r"^fine_tune: 'olmoe' is a tiny family with no weights; build it with raptor.moe.models.build_model"),
    ("tokenizer is None", {"tokenizer": None}, ConfigError, r"^tokenizer= must be a loaded tokenizer"),
    ("tokenizer is a name", {"tokenizer": "bert-base-uncased"}, ConfigError, r"^tokenizer= must be a loaded tokenizer"),
    ("train is None", {"train": None}, ConfigError, r"^train= is required"),
    ("train is a file path", {"train": "train.tsv"}, ConfigError, r"^train= got a path.*load_user_files"),
    ("validation is a file path", {"validation": "dev.tsv"}, ConfigError, r"^validation= got a path"),
    ("train is a dict of columns", {"train": {"sentence": ["a", "b"], "label": [0, 1]}}, ConfigError,
     r"^train= is a dict; give one record per item"),
    ("train is a list of strings", {"train": ["good film", "bad film"] * 15}, DataError,
     r"^train: record 0 is a str, not a mapping"),
    ("train is a list of tuples", {"train": [("good film", 1), ("bad film", 0)] * 15}, DataError,
     r"^train: record 0 is a tuple, not a mapping"),
    ("config is a dict", {"config": {"method": "dpsgd"}}, ConfigError, r"^config= must be a raptor.TrainConfig.*from_dict"),
    ("config is a method name", {"config": "dpsgd"}, ConfigError, r"^config= must be a raptor.TrainConfig.*got str"),
    ("config.output_dir is empty", {"config": lambda t, p: _cfg(p, output_dir="")}, ConfigError,
     r"^config.output_dir is empty"),
    ("unknown keyword: a config field", {"epsilon": 3}, ConfigError,
     r"unknown keyword argument epsilon=; epsilon is a field of PrivacyConfig"),
    ("unknown keyword: a typo", {"checkpoint_evry": 1}, ConfigError, r"checkpoint_evry=; did you mean checkpoint_every=\?"),
    ("three text_columns", {"text_columns": ["sentence", "sentence", "sentence"]}, ConfigError,
     r"^text_columns takes one column or two"),
    ("task_type typo", {"task_type": "regresion"}, ConfigError, r"^task_type='regresion' is not one of"),
    ("checkpoint_every negative", {"checkpoint_every": -1}, ConfigError, r"^checkpoint_every must be an integer >= 0"),
    ("checkpoint_every a string", {"checkpoint_every": "2"}, ConfigError, r"^checkpoint_every must be an integer >= 0"),
    ("max_new_tokens 0", {"max_new_tokens": 0}, ConfigError, r"^max_new_tokens must be an integer >= 1"),
    ("a text is None", {"train": [dict(r, sentence=None) if i == 3 else r for i, r in enumerate(ROWS[:30])]},
     DataError, r"^train: record 3: 'sentence' is None"),
    ("a label is None", {"train": [dict(r, label=None) if i == 4 else r for i, r in enumerate(ROWS[:30])]},
     DataError, r"^train: record 4: 'label' is None"),
    ("5 classes, a 2-output head", {"train": [dict(r, label=i % 5) for i, r in enumerate(ROWS[:30])],
                                    "validation": None}, ConfigError, r"^model=: its head has 2 outputs.*num_labels=5"),
    ("3 string classes, a 2-output head", {"train": [dict(r, label="abc"[i % 3]) for i, r in enumerate(ROWS[:30])],
                                           "validation": None, "public": None, "public_size": 5}, ConfigError,
     r"^model=: its head has 2 outputs.*num_labels=3"),
    ("a tokenizer larger than the embedding", {"model": lambda t, p: _model(t, vocab=8)}, ConfigError,
     r"^tokenizer=: its \d+ tokens do not fit the model's 8 embedding rows"),
]


@pytest.mark.parametrize("kwargs,error,pattern", [c[1:] for c in LIBRARY], ids=[c[0] for c in LIBRARY])
def test_fine_tune_bad_argument(kwargs, error, pattern, tok, tmp_path):
    kwargs = {k: v(tok, tmp_path) if callable(v) else v for k, v in kwargs.items()}
    with pytest.raises(error) as info:
        _call(tok, tmp_path, **kwargs)
    assert re.search(pattern, str(info.value)), str(info.value)
    assert not (tmp_path / "run").exists()  # refused before anything was written


@pytest.mark.parametrize("kwargs", [{"text_columns": "sentence"}, {"metrics": "accuracy"}],
                         ids=["text_columns as one string", "metrics as one string"])
def test_a_single_name_as_a_string_is_one_name_not_its_letters(kwargs, tok, tmp_path):
    out = _call(tok, tmp_path, **kwargs)  # before: the letters 's', 'e', 'n', ... as column / metric names
    assert out.results["steps"] == 1 and "accuracy" in out.results["final_metrics"]


# what already held when probed (kept so that it stays so): a clear RaptorError naming the cause
HELD = [
    ("a model of an unsupported family", {"model": lambda t, p: torch.nn.Linear(2, 2)}, UnsupportedModelError,
     r"no MoE adapter"),
    ("an empty train list", {"train": []}, DataError, r"^train: no records"),
    ("an empty validation list", {"validation": []}, DataError, r"^validation dev: no records"),
    ("a Dataset without the text column", {"train": _DatasetLike([{"txt": r["sentence"], "label": r["label"]}
                                                                   for r in ROWS[:30]])},
     DataError, r"^train: no text column among \['txt', 'label'\]"),
    ("a Dataset without the label column", {"train": _DatasetLike([{"sentence": r["sentence"]} for r in ROWS[:30]])},
     DataError, r"^train: record 0 lacks 'label'"),
]


@pytest.mark.parametrize("kwargs,error,pattern", [c[1:] for c in HELD], ids=[c[0] for c in HELD])
def test_fine_tune_cases_that_already_held(kwargs, error, pattern, tok, tmp_path):
    kwargs = {k: v(tok, tmp_path) if callable(v) else v for k, v in kwargs.items()}
    with pytest.raises(error, match=pattern):
        _call(tok, tmp_path, **kwargs)


# ---------------------------------------------------------------- the CLI

@pytest.mark.parametrize("argv", [["demo", "--output-dir", "", "--max-train-samples", "20", "--epochs", "1",
                                   "--no-progress"],
                                  ["audit", "mechanism", "--releases", "50", "--output-dir", ""]],
                         ids=["demo", "audit mechanism"])
def test_an_empty_output_dir_is_refused(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # before: Path("") is ".", and the outputs went here
    rc, _, err = run_cli(argv, capsys)
    one_error_line(rc, err, r"error: --output-dir is empty; give a directory path")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    (d / "train.tsv").write_text(TSV)
    (d / "dev.tsv").write_text(DEV_TSV)
    return d


def _train(data_dir, out, *extra):
    return ["train", "--model", "switch_transformers", *TINY, "--train-file", str(data_dir / "train.tsv"), "--public-size", "20",
            "--output-dir", str(out), *extra]


@pytest.fixture(scope="module")
def finished(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "out"
    assert main(_train(data_dir, out)) == 0
    return out


_HOLD = ("import sys, time\nfrom raptor.cli.run_lock import lock_output_dir\nlock_output_dir(sys.argv[1])\n"
         "print('locked', flush=True)\ntime.sleep(120)\n")


def test_a_second_run_on_the_same_output_dir_is_refused_while_the_first_runs(data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"  # a running `raptor train` holds the directory
        for extra in ((), ("--overwrite",)):
            rc, _, err = run_cli(_train(data_dir, out, *extra), capsys)
            one_error_line(rc, err, rf"--output-dir .*out: another raptor run \(pid {holder.pid} on .*\) is "
                                     r"writing there now; wait for it to end, or choose another --output-dir")
        assert sorted(p.name for p in out.iterdir()) == [".raptor.lock"]  # nothing of this run was written
    finally:
        holder.kill()  # kill -9: the holder cannot clean up
        holder.wait(timeout=60)
    assert (out / ".raptor.lock").exists()  # the lock file a killed run left
    rc, _, err = run_cli(_train(data_dir, out), capsys)  # ... does not block the next run
    assert rc == 0, err
    assert (out / "results.json").is_file() and not (out / ".raptor.lock").exists()  # removed at exit


def test_the_lock_is_released_when_the_run_fails(data_dir, tmp_path, capsys):
    out = tmp_path / "new"
    rc, _, err = run_cli(["train", "--model", "switch_transformers", *TINY, "--train-file", str(tmp_path / "missing.tsv"), "--public-size", "20",
                           "--output-dir", str(out)], capsys)
    assert rc == 2 and not out.exists()  # the lock and the directory it created are gone


def test_only_rank_0_of_a_distributed_job_takes_the_lock(tmp_path, monkeypatch):
    from raptor.cli.run_lock import lock_output_dir, release_all

    try:
        assert lock_output_dir(tmp_path / "out") is not None  # rank 0 (or a single process) holds it
        monkeypatch.setenv("RANK", "1")  # the other ranks of the torchrun job share its directory
        assert lock_output_dir(tmp_path / "out2", distributed=True) is None
        assert not (tmp_path / "out2").exists()
    finally:
        release_all()
    assert not (tmp_path / "out").exists()  # the directory the lock created, still empty, is removed


def _drop(*keys):
    def edit(state):
        for k in keys[:-1]:
            state = state[k]
        del state[keys[-1]]
    return edit


def _set(value, *keys):
    def edit(state):
        for k in keys[:-1]:
            state = state[k]
        state[keys[-1]] = value
    return edit


_WHAT = r"start a new run \(or resume it with the raptor version that wrote it\)"
CHECKPOINTS = [
    ("an older format", _set("raptor-checkpoint/1", "format"),
     r"state\.json: checkpoint format 'raptor-checkpoint/1'.*another raptor version and cannot be resumed; " + _WHAT),
    ("no format field", _drop("format"), r"state\.json: no format field.*" + _WHAT),
    ("no fingerprint", _drop("fingerprint"), r"state\.json: field 'fingerprint' is missing.*" + _WHAT),
    ("a fingerprint without its config", _drop("fingerprint", "config"),
     r"state\.json: its run fingerprint lacks config.*" + _WHAT),
    ("a fingerprint without a config field", _drop("fingerprint", "config", "max_length"),
     r"state\.json: its run fingerprint lacks config\.max_length.*" + _WHAT),
    ("no evaluation points", _drop("extra", "evals"), r"state\.json: it lacks extra\.evals.*" + _WHAT),
    ("no counters", _drop("extra", "unaccounted_steps"), r"state\.json: it lacks extra\.unaccounted_steps.*" + _WHAT),
    ("a config without the method", _drop("config", "method"), r"state\.json: it lacks config\.method.*" + _WHAT),
    ("a config without optim.lr", _drop("config", "optim", "lr"), r"state\.json: it lacks config\.optim\.lr.*" + _WHAT),
    ("a config with an unknown field", _set(1, "config", "old_knob"),
     r"state\.json: its config does not fit this version \(.*old_knob.*" + _WHAT),
    ("a privacy config with an unknown field", _set(1, "config", "privacy", "old_knob"),
     r"state\.json: its config does not fit this version \(.*old_knob.*" + _WHAT),
    ("a step beyond the plan", _set(99, "step"), r"state\.json: its step 99 is beyond this run's 1 planned updates"),
    ("a negative step", _set(-1, "step"), r"state\.json: step -1 is negative.*" + _WHAT),
    ("a file without its digest", _drop("files", "optimizers.pt"),
     r"state\.json: records no SHA-256 for optimizers\.pt.*" + _WHAT),
]


@pytest.mark.parametrize("edit,pattern", [c[1:] for c in CHECKPOINTS], ids=[c[0] for c in CHECKPOINTS])
def test_a_checkpoint_of_another_version_is_one_line(edit, pattern, finished, data_dir, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    state_file = run / "checkpoint" / "state.json"
    state = json.loads(state_file.read_text())
    edit(state)
    state_file.write_text(json.dumps(state))
    before = (run / "results.json").read_bytes()
    rc, _, err = run_cli(_train(data_dir, run, "--resume", str(run / "checkpoint")), capsys)
    one_error_line(rc, err, pattern)
    assert str(state_file) in err
    assert (run / "results.json").read_bytes() == before


def test_a_budget_stop_reports_the_dev_metrics_of_the_saved_model(data_dir, tmp_path, capsys, budget_runs_out):
    budget_runs_out(1)
    out = tmp_path / "run"
    tiny = [a if a != "1" or TINY[i - 1] != "--steps" else "3" for i, a in enumerate(TINY)]
    argv = ["train", "--model", "switch_transformers", *tiny, "--train-file", str(data_dir / "train.tsv"), "--public-size", "20",
            "--validation-file", str(data_dir / "dev.tsv"), "--output-dir", str(out)]
    rc, _, err = run_cli(argv, capsys)
    assert rc == 2 and "would exceed the privacy budget (test)" in err
    res = json.loads((out / "results.json").read_text())
    assert res["steps"] == 1 and "exceed" in res["stopped_by_budget"]
    assert set(res["final_metrics"]) >= {"accuracy"} and res["evals"][-1]["step"] == 1
    # the evaluation is of the model as saved: raptor predict on the saved model agrees
    pred = tmp_path / "p.csv"
    assert main(["predict", "--model", str(out), "--input", str(data_dir / "dev.tsv"), "--output", str(pred),
                 "--no-progress"]) == 0
    import csv

    rows = list(csv.DictReader(pred.open()))
    truth = [line.split("\t")[1] for line in DEV_TSV.splitlines()[1:]]
    accuracy = sum(r["prediction"] == t for r, t in zip(rows, truth, strict=True)) / len(truth)
    assert accuracy == pytest.approx(res["final_metrics"]["accuracy"])


def test_the_library_budget_stop_carries_the_evaluation_too(tok, tmp_path, budget_runs_out):
    from raptor.errors import BudgetExceededError

    budget_runs_out(2, "over budget (test)")
    with pytest.raises(BudgetExceededError) as info:
        _call(tok, tmp_path, config=raptor.tiny_recipe("dpsgd", steps=3, output_dir=str(tmp_path / "run")))
    res = info.value.partial.results
    assert res["steps"] == 2 and res["evals"][-1]["step"] == 2 and "accuracy" in res["final_metrics"]
    assert info.value.partial.trainer.state.step == 2  # the evaluation is of the model the partial result holds
