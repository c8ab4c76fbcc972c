"""Bad inputs of every command (train, predict, demo, check, account, plan, inspect, pretrain, audit).

An ``error`` case exits with status 2 and prints exactly one ``raptor <cmd>: error:`` line naming
the file, line or flag, with no traceback; files listed in ``unchanged`` keep their bytes; a case
that used to hang runs under an alarm (a bound, not a timing assertion). An ``ok`` case exits 0 and
prints the line that was missing (the inferred task type, a warning).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import signal
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from bad_input_files import GOOD_TSV, ROWS, TINY, tsv

from raptor.cli.main import main
from raptor.data.textio import read_table
from raptor.data.user_files import load_user_files

PUBLIC_TSV = tsv([(f"public {s}", y) for s, y in ROWS[:30]])
QA_TSV = "prompt\tanswer\n" + "".join(f"colour {i}?\tred\n" for i in range(30))
ALARM_S = 120  # a bound on the cases that used to hang


@dataclass(frozen=True)
class Case:
    name: str
    argv: list  # "{d}": the case directory; "{run}": a copy of a finished run; "{run2}": another copy
    expect: str  # regex: the error line (outcome "error") or a line of the output (outcome "ok")
    files: dict = field(default_factory=dict)  # name -> str | bytes
    train: bool = True  # prepend `train`, the tiny flags and --output-dir {d}/out
    outcome: str = "error"  # "error": exit 2, one error line | "ok": exit 0 | "interrupt": exit 130/143
    unchanged: tuple = ()  # paths ("{d}/x.csv", "{run2}/results.json") whose bytes must not change
    patch: str | None = None  # name of a monkeypatch set-up below
    drop: str | None = None  # a tiny flag (or --set item) the case leaves out (--steps for an --epochs case)


def _user(*extra, public=("--public-file", "{d}/public.tsv")):
    return ["--train-file", "{d}/train.tsv", *public, *extra]


F = {"train.tsv": GOOD_TSV, "public.tsv": PUBLIC_TSV}
ELF = b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4


def _zip_bytes():
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("train.tsv", GOOD_TSV)
    return buf.getvalue()


CASES = [
    # ---- lost
    Case("--resume into an --output-dir holding another run", _user("--resume", "{run}/checkpoint", "--output-dir",
                                                                     "{run2}", public=("--public-size", "20")),
         r"--output-dir .*run2: already holds another run .*--resume", F, unchanged=("{run2}/results.json",
                                                                                      "{run2}/model/model.safetensors")),
    Case("predict --output equal to --input", ["predict", "--model", "{run}", "--input", "{d}/x.csv", "--output",
                                               "{d}/x.csv"], r"--output .*x\.csv: is the --input file",
         {"x.csv": "sentence,label\nnice film,1\ndull plot,0\n"}, train=False, unchanged=("{d}/x.csv",)),
    Case("demo --output-dir is a file", ["demo", "--output-dir", "{d}/train.tsv", "--max-train-samples", "20",
                                         "--epochs", "1", "--no-progress"], r"--output-dir .*train\.tsv: is an existing file",
         F, train=False, unchanged=("{d}/train.tsv",)),
    # ---- silently wrong
    Case("one fractional label among whole numbers", ["--train-file", "{d}/n.tsv", "--public-size", "20"],
         r"n\.tsv: line 4: label '0\.5' .*--set data.task_type", {"n.tsv": tsv(ROWS[:2] + [("typo", "0.5")] + ROWS[2:])}),
    Case("25 integer classes: the inferred task type is printed", ["--train-file", "{d}/m.tsv", "--public-size", "20"],
         r"task regression \(inferred", {"m.tsv": tsv([(s, i % 25) for i, (s, _) in enumerate(ROWS)])}, outcome="ok"),
    Case("JSONL with a duplicated key", ["--train-file", "{d}/j.jsonl", "--public-size", "2"],
         r"j\.jsonl: line 2: duplicate key 'label'",
         {"j.jsonl": '{"sentence": "a", "label": 1}\n{"sentence": "b", "label": 0, "label": 1}\n'
                     + "".join(f'{{"sentence": "c{i}", "label": {i % 2}}}\n' for i in range(20))}),
    Case("--text-column equal to --label-column", _user("--text-column", "label", "--label-column", "label"),
         r"--text-column 'label' is also the --label-column", F),
    Case("--public-file is the --train-file", _user(public=("--public-file", "{d}/train.tsv")),
         r"--public-file .*train\.tsv: is the --train-file", F),
    Case("--public-file is a copy of the --train-file", _user(public=("--public-file", "{d}/copy.tsv")),
         r"--public-file .*copy\.tsv: has the same content as the --train-file", {**F, "copy.tsv": GOOD_TSV}),
    Case("public and private records overlap: a warning", _user(public=("--public-file", "{d}/half.tsv")),
         r"warning: .*half\.tsv: \d+ of the 60 --train-file records are also in the --public-file",
         {**F, "half.tsv": tsv(ROWS[:5] + [(f"other {s}", y) for s, y in ROWS[:25]])}, outcome="ok"),
    Case("--layers auto:K beyond the model", _user("--layers", "auto:99"),
         r"--layers auto:99 \(num_auto_layers\): the model has only 2 MoE layers", F),
    Case("--checkpoint-every negative", _user("--set", "run.checkpoint_every=-1"),
         r"--set run.checkpoint_every must be an integer >= 0", F),
    Case("--max-eval-samples 0", _user("--set", "data.max_eval_samples=0"),
         r"--set data.max_eval_samples must be an integer >= 1", F),
    Case("predict --max-length 0", ["predict", "--model", "{run}", "--input", "{d}/train.tsv", "--max-length", "0"],
         r"--max-length must be an integer >= 1", F, train=False),
    Case("check --batch-size 0", ["check", "olmoe", "--batch-size", "0"], r"--batch-size must be an integer >= 1",
         train=False),
    Case("--output-dir empty", _user("--output-dir", ""), r"--output-dir is empty", F),
    # ---- tracebacks
    Case("--seed above 2**64", _user("--seed", str(2**64 + 1)), r"--seed must be an integer in \[0, 2\*\*63\)", F),
    Case("--public-size inf", ["--train-file", "{d}/train.tsv", "--public-size", "inf"],
         r"--public-size must be a finite", F),
    Case("unreadable train file", ["--train-file", "{d}/train.tsv", "--public-size", "20"],
         r"train\.tsv: cannot be read \(Permission denied\)", F, patch="unreadable"),
    Case("--max-length beyond the model", _user("--max-length", "100000"), r"--max-length 100000 is above", F),
    Case("model dir with a truncated config.json", _user("--model", "{d}/m"), r"m/config\.json: not valid JSON",
         {**F, "m/config.json": '{"model_type": "switch', "m/model.safetensors": b"x"}),
    Case("model dir with a list as config", _user("--model", "{d}/m"), r"m/config\.json: expected a JSON object",
         {**F, "m/config.json": "[]", "m/model.safetensors": b"x"}),
    Case("model dir without weights", _user("--model", "{d}/m"), r"--model .*m: no weights file",
         {**F, "m/config.json": '{"model_type": "switch_transformers"}'}),
    Case("output on a full disk", _user(), r"no space left on the device", F, patch="full_disk"),
    Case("predict --output on a read-only file system", ["predict", "--model", "{run}", "--input", "{d}/train.tsv",
                                                         "--output", "/proc/raptor_predictions.csv"],
         r"--output /proc/raptor_predictions\.csv: cannot be written", F, train=False, patch="count_forward"),
    Case("predict on a truncated model.safetensors", ["predict", "--model", "{run}", "--input", "{d}/train.tsv"],
         r"model\.safetensors: truncated", F, train=False, patch="truncate_weights"),
    Case("account --noise-multiplier 1e-4", ["account", "--sample-rate", "0.01", "--noise-multiplier", "1e-4",
                                             "--steps", "10", "--delta", "1e-5"], r"--noise-multiplier 0\.0001 .*--accountant rdp",
         train=False),
    Case("account --steps 1e12", ["account", "--sample-rate", "0.01", "--noise-multiplier", "1", "--steps",
                                  str(10**12), "--delta", "1e-5"], r"1000000000000 .*steps", train=False),
    Case("check --seq-len 0", ["check", "olmoe", "--seq-len", "0"], r"--seq-len must be an integer >= 2", train=False),
    Case("Ctrl-C", _user(), r"^raptor train: interrupted; checkpoint at step 1 in .*resume with .*--resume", F,
         outcome="interrupt", patch="ctrl_c"),
    Case("SIGTERM", _user(), r"^raptor train: terminated \(SIGTERM\); checkpoint at step 1 in .*--resume", F,
         outcome="interrupt", patch="sigterm"),
    # ---- hangs
    Case("--epochs 1e9", _user("--epochs", "1e9"), r"--epochs .*steps", F, drop="--steps"),
    Case("--steps 1e12", _user("--steps", str(10**12)), r"--steps 1000000000000", F),
    Case("plan --epochs 1e9", ["plan", "--dataset-size", "1000", "--batch-size", "10", "--epochs", "1e9", "--epsilon",
                               "1"], r"--epochs", train=False),
    Case("a FIFO as --train-file", ["--train-file", "{d}/fifo.tsv", "--public-size", "20"],
         r"fifo\.tsv: is not a regular file \(a FIFO", {}, patch="fifo"),
    # ---- misleading one-liners
    Case("an ELF binary", ["--train-file", "{d}/b.tsv", "--public-size", "20"], r"b\.tsv: is an ELF executable", {"b.tsv": ELF}),
    Case("gzip data without .gz", ["--train-file", "{d}/g.tsv", "--public-size", "20"],
         r"g\.tsv: is gzip-compressed data; name it g\.tsv\.gz", {"g.tsv": gzip.compress(GOOD_TSV.encode())}),
    Case("a .gz holding a binary", ["--train-file", "{d}/b.tsv.gz", "--public-size", "20"],
         r"b\.tsv\.gz: .*is an ELF executable", {"b.tsv.gz": gzip.compress(ELF)}),
    Case("a zip archive", ["--train-file", "{d}/z.csv", "--public-size", "20"], r"z\.csv: is a zip archive",
         {"z.csv": _zip_bytes()}),
    Case("a PDF", ["--train-file", "{d}/p.csv", "--public-size", "20"], r"p\.csv: is a PDF document",
         {"p.csv": b"%PDF-1.4\n" + bytes(range(256))}),
    Case("a parquet file", ["--train-file", "{d}/p.jsonl", "--public-size", "20"], r"p\.jsonl: is a Parquet file",
         {"p.jsonl": b"PAR1" + bytes(range(256)) + b"PAR1"}),
    Case("a pretty-printed JSON array", ["--train-file", "{d}/a.json", "--public-size", "20"],
         r"a\.json: .*a JSON array.*JSON Lines",
         {"a.json": json.dumps([{"sentence": s, "label": y} for s, y in ROWS], indent=2)}),
    Case("--max-train-samples 0", _user("--set", "data.max_train_samples=0"),
         r"--set data.max_train_samples must be an integer >= 1", F),
    Case("--max-train-samples -1", _user("--set", "data.max_train_samples=-1"),
         r"--set data.max_train_samples must be an integer >= 1", F),
    Case("--objective generate on a .tsv", ["--objective", "generate", "--model", "olmoe", "--train-file", "{d}/qa.tsv",
                                            "--public-size", "8"], r"--objective generate reads JSON Lines.*qa\.tsv",
         {"qa.tsv": QA_TSV}),
    Case("--tokenizer that does not exist", _user("--set", "model.tokenizer=nonexistent"),
         r"--set model.tokenizer nonexistent: no such directory or file", F),
    Case("--alternate 0:1 names the flag", _user("--set", "privacy.schedule.alternate=0,1"),
         r"^raptor train: error: --set privacy.schedule.alternate", F),
    Case("--hidden-size 6 names the flag", _user("--set", "model.hidden_size=6"),
         r"^raptor train: error: --set model.hidden_size=6", F, drop="model.hidden_size=16"),
    Case("--num-experts 0 names the flag", _user("--set", "model.num_experts=0"),
         r"^raptor train: error: --set model.num_experts", F),
    # ---- the other commands
    *[Case(f"inspect {' '.join(extra)}", ["inspect", "--model", "switch_transformers", "--train-file", "{d}/train.tsv", "--public-size", "20",
                                          "--vocab-size", "60", "--hidden-size", "16", *extra], expect, F, train=False)
      for extra, expect in [(["--batch-size", "0"], r"--batch-size must be an integer >= 1"),
                            (["--noise-multiplier", "-1"], r"--noise-multiplier must be a positive"),
                            (["--seed", str(2**64 + 1)], r"--seed must be an integer in"),
                            (["--hidden-size", "6"], r"--hidden-size 6 must be a multiple of 4"),
                            (["--max-length", "100000"], r"--max-length 100000 is above"),
                            (["--tokenizer", "nonexistent"], r"--tokenizer nonexistent: no such directory"),
                            (["--max-train-samples", "0"], r"--max-train-samples must be an integer >= 1")]],
    Case("inspect --public-size inf", ["inspect", "--model", "switch_transformers", "--train-file", "{d}/train.tsv", "--public-size", "inf"],
         r"--public-size must be a finite", F, train=False),
    Case("pretrain --output-dir is a file", ["pretrain", "--text", "{d}/train.tsv", "--output-dir", "{d}/public.tsv"],
         r"--output-dir .*public\.tsv: is an existing file", F, train=False, unchanged=("{d}/public.tsv",)),
    Case("audit --output-dir is a file", ["audit", "mechanism", "--releases", "100", "--output-dir", "{d}/public.tsv"],
         r"--output-dir .*public\.tsv: is an existing file", F, train=False, unchanged=("{d}/public.tsv",)),
    Case("audit --confidence 1.5", ["audit", "mechanism", "--confidence", "1.5", "--output-dir", "{d}/a"],
         r"--confidence must be in \(0\.5, 1\)", train=False),
    Case("bench --json under a file", ["bench", "--families", "olmoe", "--reps", "1", "--json", "{d}/public.tsv/b.json"],
         r"--json .*public\.tsv is a file", F, train=False),
    # ---- also
    Case("--steps: the settings line says steps, not epochs", _user("--steps", "2"),
         r"2 steps \(--steps\) over 60 private records", F, outcome="ok"),
    Case("--public-size: a warning says the records lose DP protection", ["--train-file", "{d}/train.tsv",
                                                                          "--public-size", "20"],
         r"warning: --public-size 20: 20 records of .*train\.tsv are public and lose DP protection", F, outcome="ok"),
]


class _Alarm(Exception):
    pass


@contextlib.contextmanager
def _alarm(seconds):
    def fire(*_):
        raise _Alarm(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _patch(name, monkeypatch, d, run):
    import raptor.training.run.fine_tune as fine_tune

    if name == "unreadable":
        real = Path.read_bytes

        def denied(self):
            if self.name == "train.tsv":
                raise PermissionError(13, "Permission denied", str(self))
            return real(self)

        monkeypatch.setattr(Path, "read_bytes", denied)
    elif name == "fifo":
        os.mkfifo(d / "fifo.tsv")
    elif name == "truncate_weights":
        weights = run / "model" / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:-100])
    elif name == "count_forward":  # predictions must not be computed when the output cannot be written
        import raptor.training.step.plain as plain

        def refuse(*a, **k):
            raise AssertionError("predictions computed before --output was checked")

        monkeypatch.setattr(plain, "classification_logits", refuse)
    elif name == "full_disk":
        from safetensors import SafetensorError

        import raptor.training.saving.final_model as final_model

        def full(*a, **k):
            raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: '
                                  '"No space left on device" })')

        monkeypatch.setattr(final_model, "save_final_model", full)
    elif name in ("ctrl_c", "sigterm"):
        def interrupted(self):
            config = self.trainer.config  # the prepared run's TrainConfig
            shutil.copytree(run / "checkpoint", Path(config.output_dir) / "checkpoint")
            if name == "ctrl_c":
                raise KeyboardInterrupt
            handler = signal.getsignal(signal.SIGTERM)
            if not callable(handler):  # the default action would end this test process
                raise AssertionError("raptor train installs no SIGTERM handler")
            handler(signal.SIGTERM, None)

        monkeypatch.setattr(fine_tune.PreparedRun, "fit", interrupted)
    else:
        raise AssertionError(name)


def _fill(s, d, run, run2):
    return s.replace("{d}", str(d)).replace("{run2}", str(run2)).replace("{run}", str(run))


def run_case(case, d, finished_run, capsys, monkeypatch):
    run, run2 = d / "run_copy", d / "run2"
    shutil.copytree(finished_run, run)
    shutil.copytree(finished_run, run2)
    for name, content in case.files.items():
        path = d / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    if case.patch:
        _patch(case.patch, monkeypatch, d, run)
    before = {p: Path(_fill(p, d, run, run2)).read_bytes() for p in case.unchanged}
    argv = [_fill(a, d, run, run2) for a in case.argv]
    tiny = list(TINY)
    if case.drop:  # a tiny default that the case replaces (e.g. --steps for an --epochs case)
        i = tiny.index(case.drop)
        start = i if case.drop.startswith("--") else i - 1  # a flag and its value, or "--set" and its item
        del tiny[start:start + 2]
    if case.train:
        argv = ["train", "--model", "switch_transformers", *tiny, *([] if "--output-dir" in argv else ["--output-dir", str(d / "out")]), *argv]
    capsys.readouterr()
    try:
        with _alarm(ALARM_S):
            rc = main(argv)
    except SystemExit as exit_:
        rc = exit_.code
    except BaseException as err:  # a traceback or a hang: the case fails with what happened
        rc = f"raised {type(err).__name__}: {err}"
    out = capsys.readouterr()
    after = {p: Path(_fill(p, d, run, run2)).read_bytes() for p in case.unchanged}
    return rc, out.out, out.err, before == after


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_bad_input_is_one_clear_line(case, tmp_path, finished_run, capsys, monkeypatch):
    rc, out, err, kept = run_case(case, tmp_path, finished_run, capsys, monkeypatch)
    assert kept, "a file that must not change was overwritten"
    assert "Traceback" not in err
    if case.outcome == "ok":
        assert rc == 0, (rc, err)
        assert any(re.search(case.expect, line) for line in (out + err).splitlines()), out + err
        return
    if case.outcome == "interrupt":
        assert rc in (130, 143), (rc, err)
        lines = [line for line in err.splitlines() if line.strip()]
    else:
        assert rc == 2, (rc, err)
        lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    assert re.search(case.expect, lines[0]), lines[0]


# ---- cases whose right outcome is that a valid file is read as it is


def test_jsonl_with_line_separators_inside_strings_is_read(tmp_path):
    path = tmp_path / "t.jsonl"
    texts = ["one\u2028two", "three\u0085four", "five\x1cix", "plain"]
    path.write_text("".join(json.dumps({"sentence": t, "label": i % 2}, ensure_ascii=False) + "\n"
                            for i, t in enumerate(texts)), encoding="utf-8")
    table = read_table(path)
    assert [r.fields["sentence"] for r in table.records] == texts
    assert [r.line for r in table.records] == [1, 2, 3, 4]


def test_labels_with_underscores_are_not_merged_with_numbers(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_text(tsv([("a", "1_000"), ("b", "1000"), ("c", "0"), ("d", "1000")]))
    data = load_user_files(path).train
    assert data.task_type == "classification"
    assert sorted(data.label_names) == ["0", "1000", "1_000"]


if __name__ == "__main__":  # the every-command table of docs/ERRORS.md, from a real run of every case
    import sys
    import tempfile

    class _Cap:
        def readouterr(self):
            out = type("R", (), {})()
            out.out, out.err = sys.stdout.getvalue(), sys.stderr.getvalue()
            for s in (sys.stdout, sys.stderr):
                s.truncate(0)
                s.seek(0)
            return out

    import io

    real_out, real_err = sys.stdout, sys.stderr
    rows = []
    with tempfile.TemporaryDirectory() as base:
        sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
        d0 = Path(base) / "run"
        d0.mkdir()
        (d0 / "train.tsv").write_text(GOOD_TSV)
        main(["train", "--model", "switch_transformers", *TINY, "--train-file", str(d0 / "train.tsv"), "--public-size", "20", "--output-dir",
              str(d0 / "out")])
        for i, case in enumerate(CASES):
            d = Path(base) / f"c{i}"
            d.mkdir()
            mp = pytest.MonkeyPatch()
            try:
                rc, out, err, _ = run_case(case, d, d0 / "out", _Cap(), mp)
            finally:
                mp.undo()
            if case.outcome == "ok":
                line = next((x for x in (out + err).splitlines() if re.search(case.expect, x)), "?")
            else:
                line = next((x for x in err.splitlines() if "error:" in x or "raptor train: " in x), err.strip())
            rows.append(f"| {case.name} | {rc} | `{line.replace(base, '…').replace('|', '/')}` |")
    sys.stdout, sys.stderr = real_out, real_err
    print("\n".join(rows))
