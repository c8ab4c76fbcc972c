"""The bad-input suite of ``raptor train`` and ``raptor predict``: each class of bad input gives ONE clear error line on stderr
naming what to fix, a non-zero exit, and no traceback. The table is also the source of
docs/ERRORS.md (``python tests/cli/test_bad_inputs.py`` prints it)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import shutil
from dataclasses import dataclass, field

import pytest
from bad_input_files import GOOD_TSV, ROWS, TINY, tsv

from raptor.cli.main import main

HAVE_DATASETS = importlib.util.find_spec("datasets") is not None


@dataclass(frozen=True)
class Case:
    name: str
    argv: list  # "{d}" is the case directory, "{run}" a finished run's directory
    expect: str  # regex the error line must match
    files: dict = field(default_factory=dict)  # name -> str | bytes
    train: bool = True  # prepend `train`, the tiny flags and a good --train-file unless the case gives one


def _user(*extra):
    return ["--train-file", "{d}/train.tsv", "--public-size", "20", *extra]


QA_JSONL = "".join(f'{{"prompt": "colour of item {i}?", "answer": "{["red", "blue"][i % 2]}"}}\n' for i in range(30))


def _gen(*extra):
    return ["--objective", "generate", "--model", "olmoe", "--train-file", "{d}/qa.jsonl", "--public-size", "8", *extra]


CASES = [
    # ---- data files
    Case("train file missing", ["--train-file", "{d}/nope.tsv", "--public-size", "20"], r"nope\.tsv: file not found"),
    Case("train file is a directory", ["--train-file", "{d}", "--public-size", "20"], r"is a directory, not a file"),
    Case("unknown file suffix", ["--train-file", "{d}/train.txt", "--public-size", "20"], r"unknown file type '\.txt'",
         {"train.txt": GOOD_TSV}),
    Case("empty file", ["--train-file", "{d}/e.tsv", "--public-size", "20"], r"file is empty", {"e.tsv": ""}),
    Case("header only", ["--train-file", "{d}/h.tsv", "--public-size", "20"], r"has a header .* but no records",
         {"h.tsv": "sentence\tlabel\n"}),
    Case("not UTF-8 (latin-1)", ["--train-file", "{d}/l.tsv", "--public-size", "20"], r"undecodable bytes .* UTF-8",
         {"l.tsv": (GOOD_TSV + "caf\xe9\t1\n").encode("latin-1")}),
    Case("UTF-16 file", ["--train-file", "{d}/u.tsv", "--public-size", "20"], r"looks like UTF-16",
         {"u.tsv": GOOD_TSV.encode("utf-16")}),
    Case("broken gzip", ["--train-file", "{d}/g.tsv.gz", "--public-size", "20"], r"not a valid gzip file",
         {"g.tsv.gz": b"\x1f\x8bnot gzip at all"}),
    Case("TSV row with a wrong field count", ["--train-file", "{d}/f.tsv", "--public-size", "20"],
         r"line 3: expected 2 tab-separated fields", {"f.tsv": tsv([("a film", 1), ("x", 0, "extra")])}),
    Case("CSV with an unterminated quote", ["--train-file", "{d}/q.csv", "--public-size", "20"],
         r"q\.csv: line 32: expected 2 comma-separated fields",
         {"q.csv": "sentence,label\n" + "a,1\n" * 30 + '"never closed,1\n'}),
    Case("JSONL line that is not JSON", ["--train-file", "{d}/j.jsonl", "--public-size", "20"],
         r"line 2, column \d+: invalid JSON", {"j.jsonl": '{"sentence": "a", "label": 1}\n{"sentence": \n'}),
    Case("JSONL line that is not an object", ["--train-file", "{d}/j.jsonl", "--public-size", "20"],
         r"line 2: expected a JSON object, found list", {"j.jsonl": '{"sentence": "a", "label": 1}\n[1, 2]\n'}),
    Case("JSONL text that is not a string", ["--train-file", "{d}/j.jsonl", "--public-size", "2"],
         r"text column 'sentence' holds int", {"j.jsonl": '{"sentence": "a", "label": 1}\n{"sentence": 5, "label": 0}\n'}),
    Case("missing --text-column", _user("--text-column", "review"), r"missing text column 'review'",
         {"train.tsv": GOOD_TSV}),
    Case("missing --label-column", _user("--label-column", "stars"), r"missing label column 'stars'",
         {"train.tsv": GOOD_TSV}),
    Case("no default text column", ["--train-file", "{d}/t.tsv", "--public-size", "20"], r"pass --text-column NAME",
         {"t.tsv": tsv(ROWS, header="review\tlabel")}),
    Case("three --text-column names", _user("--text-column", "a", "b", "c"), r"--text-column takes one or two",
         {"train.tsv": GOOD_TSV}),
    Case("nan label", ["--train-file", "{d}/n.tsv", "--public-size", "20"], r"line 4: label 'nan' .* not a number",
         {"n.tsv": tsv([("a", 1), ("b", 0), ("c", "nan")] + ROWS)}),
    Case("infinite label", ["--train-file", "{d}/n.tsv", "--public-size", "20"], r"line 2: label 'inf' .* not a number",
         {"n.tsv": tsv([("a", "inf")] + ROWS)}),
    Case("regression label that is not a number", ["--train-file", "{d}/n.tsv", "--public-size", "20", "--set",
                                                   "data.task_type=regression"], r"line 2: label 'pos' .* not a number",
         {"n.tsv": tsv([("a", "pos")] + ROWS)}),
    Case("--task-type with a GLUE --task", ["--task", "sst2", "--set", "data.task_type=regression"],
         r"--set data.task_type applies to --train-file"),
    Case("empty label", ["--train-file", "{d}/n.tsv", "--public-size", "20"], r"line 2: empty label",
         {"n.tsv": tsv([("a", " ")] + ROWS)}),
    Case("a single label value", ["--train-file", "{d}/n.tsv", "--public-size", "2"], r"single label value '1'",
         {"n.tsv": tsv([("a", 1), ("b", 1), ("c", 1.0)])}),
    Case("duplicate header columns", ["--train-file", "{d}/n.tsv", "--public-size", "2"], r"duplicate column name",
         {"n.tsv": "sentence\tsentence\tlabel\na\tb\t1\n"}),
    Case("validation label unseen in train", _user("--validation-file", "{d}/dev.tsv"), r"dev\.tsv: line 2: class '7' .* not in the train file",
         {"train.tsv": GOOD_TSV, "dev.tsv": tsv([("a", 7)])}),
    Case("validation file missing", _user("--validation-file", "{d}/nope.tsv"), r"nope\.tsv: file not found",
         {"train.tsv": GOOD_TSV}),
    Case("pair task given one text column", _user("--task", "mrpc"), r"task mrpc takes sentence pairs",
         {"train.tsv": GOOD_TSV}),
    # ---- data sources and public data
    # Without the optional `datasets` package (CI installs only `.[dev]`) the error says how to get it.
    Case("--task without --data-dir and no cached copy", ["--task", "sst2", "--set", "data.hf_cache={d}"],
         r"no cached copy of glue/sst2 .*never downloads" if HAVE_DATASETS
         else r"needs the `datasets` package: pip install raptor-dp\[hub\].*--data-dir"),
    Case("--data-dir that does not exist", ["--task", "sst2", "--data-dir", "{d}/nope"], r"nope"),
    Case("unknown --task", ["--task", "imdbx", "--data-dir", "{d}"], r"imdbx"),
    Case("--train-file together with --task/--data-dir", _user("--task", "sst2", "--data-dir", "{d}"),
         r"either --task/--data-dir or --train-file", {"train.tsv": GOOD_TSV}),
    Case("no public source declared", ["--train-file", "{d}/train.tsv"], r"no public data declared, and this run needs it for .*--public-file FILE.*--public-size K",
         {"train.tsv": GOOD_TSV}),
    Case("--public-file and --public-size", _user("--public-file", "{d}/train.tsv"), r"either --public-file or --public-size",
         {"train.tsv": GOOD_TSV}),
    Case("--public-size not positive", ["--train-file", "{d}/train.tsv", "--public-size", "-3"], r"--public-size must be",
         {"train.tsv": GOOD_TSV}),
    Case("--public-size larger than the data", ["--train-file", "{d}/train.tsv", "--public-size", "5000"], r"public",
         {"train.tsv": GOOD_TSV}),
    Case("--public-size count not whole", ["--train-file", "{d}/train.tsv", "--public-size", "2.5"],
         r"--public-size 2.5: a count must be a whole number", {"train.tsv": GOOD_TSV}),
    Case("--public-file missing", ["--train-file", "{d}/train.tsv", "--public-file", "{d}/nope.tsv"],
         r"nope\.tsv: file not found", {"train.tsv": GOOD_TSV}),
    # ---- flags
    Case("negative --epsilon", _user("--epsilon", "-1"), r"--epsilon must be a positive finite number", {"train.tsv": GOOD_TSV}),
    Case("nan --epsilon", _user("--epsilon", "nan"), r"--epsilon must be a positive finite number", {"train.tsv": GOOD_TSV}),
    Case("--delta outside (0, 1)", _user("--delta", "2"), r"--delta must be", {"train.tsv": GOOD_TSV}),
    Case("--batch-size 0", _user("--batch-size", "0"), r"--batch-size must be an integer >= 1", {"train.tsv": GOOD_TSV}),
    Case("--batch-size not below N", _user("--batch-size", "500"), r"batch_size 500 \(--batch-size\) must be below", {"train.tsv": GOOD_TSV}),
    Case("--batch-size not an integer", _user("--batch-size", "x"), r"--batch-size: invalid int value", {"train.tsv": GOOD_TSV}),
    Case("negative --lr", _user("--lr", "-1"), r"--lr must be a positive finite number", {"train.tsv": GOOD_TSV}),
    Case("--epochs 0", _user("--epochs", "0"), r"--epochs must be a positive finite number", {"train.tsv": GOOD_TSV}),
    Case("--steps 0", _user("--steps", "0"), r"--steps must be an integer >= 1", {"train.tsv": GOOD_TSV}),
    Case("--layers not a list", _user("--layers", "x"), r"--layers must be 'auto'", {"train.tsv": GOOD_TSV}),
    Case("--layers outside the model", _user("--layers", "9"), r"layers \[9\] are not MoE layers", {"train.tsv": GOOD_TSV}),
    Case("--clip 0", _user("--clip", "0"), r"--clip must be a positive number \(inf allowed\)", {"train.tsv": GOOD_TSV}),
    Case("--shared-ratio outside (0, 1)", _user("--set", "privacy.shared_ratio=1.5"),
         r"--set privacy.shared_ratio must be in \(0, 1\)",
         {"train.tsv": GOOD_TSV}),
    Case("bad --alternate", _user("--set", "privacy.schedule.alternate=x"),
         r"--set privacy.schedule.alternate=x: privacy.schedule.alternate takes 2 comma-separated values", {"train.tsv": GOOD_TSV}),
    Case("--max-length too small", _user("--max-length", "0"), r"--max-length must be an integer >= 1", {"train.tsv": GOOD_TSV}),
    Case("unknown --method", _user("--method", "magic"), r"--method: invalid choice: 'magic'", {"train.tsv": GOOD_TSV}),
    Case("unknown flag", _user("--epsilom", "3"), r"unrecognized arguments: --epsilom", {"train.tsv": GOOD_TSV}),
    Case("--label-words without --head-init", _user("--set", "model.label_words=bad,good"),
         r"--set model.label_words is used only with",
         {"train.tsv": GOOD_TSV}),
    Case("--device cuda without CUDA", _user("--device", "cuda"), r"--device cuda: CUDA is not available",
         {"train.tsv": GOOD_TSV}),
    Case("--device that is not a device", _user("--device", "gpu0"), r"--device 'gpu0' is not a device name",
         {"train.tsv": GOOD_TSV}),
    Case("unknown --model", _user("--model", "no_such_family"), r"--model no_such_family: no such family .*switch_transformers",
         {"train.tsv": GOOD_TSV}),
    Case("--model directory without config.json", _user("--model", "{d}"), r"not a model directory \(no config.json\)",
         {"train.tsv": GOOD_TSV}),
    # ---- output directory
    Case("--output-dir is a file", _user("--output-dir", "{d}/train.tsv"), r"--output-dir .*is an existing file",
         {"train.tsv": GOOD_TSV}),
    Case("--output-dir under a file", _user("--output-dir", "{d}/train.tsv/sub"), r"is a file, so the directory cannot",
         {"train.tsv": GOOD_TSV}),
    Case("--output-dir already holds a run", _user("--output-dir", "{d}"), r"already holds a run .*--overwrite",
         {"train.tsv": GOOD_TSV, "results.json": "{}"}),
    # ---- resume
    Case("--resume that does not exist", _user("--resume", "{d}/nope"), r"no such checkpoint directory",
         {"train.tsv": GOOD_TSV}),
    Case("--resume of a directory that is no checkpoint", _user("--resume", "{d}"), r"not a raptor checkpoint",
         {"train.tsv": GOOD_TSV}),
    Case("--resume with a corrupt state.json", _user("--resume", "{run}/checkpoint"), r"state\.json: corrupt or truncated",
         {"train.tsv": GOOD_TSV, "@damage": "state.json"}),
    Case("--resume with truncated weights", _user("--resume", "{run}/checkpoint"), r"model\.safetensors: corrupt or truncated",
         {"train.tsv": GOOD_TSV, "@damage": "model.safetensors"}),
    Case("--resume with a truncated optimizer file", _user("--resume", "{run}/checkpoint"),
         r"optimizers\.pt: corrupt or truncated", {"train.tsv": GOOD_TSV, "@damage": "optimizers.pt"}),
    Case("--resume with an invalid ledger", _user("--resume", "{run}/checkpoint"), r"state\.json: invalid privacy ledger",
         {"train.tsv": GOOD_TSV, "@damage": "ledger"}),
    Case("--resume with other --steps", _user("--resume", "{run}/checkpoint", "--steps", "3"),
         r"differs from the one that wrote the checkpoint: --steps \(steps\): 1 -> 3", {"train.tsv": GOOD_TSV}),
    Case("--resume with another --method", _user("--resume", "{run}/checkpoint", "--method", "dpsgd"),
         r"the method changed: the checkpoint was written by a --method raptor run, this run asks for --method dpsgd",
         {"train.tsv": GOOD_TSV}),
    Case("--resume with other data", ["--train-file", "{d}/other.tsv", "--public-size", "20", "--resume", "{run}/checkpoint"],
         r"private records: different records", {"other.tsv": tsv([(f"other {s}", y) for s, y in ROWS])}),
    Case("--resume with another --lr", _user("--resume", "{run}/checkpoint", "--lr", "0.5"),
         r"--lr \(optim.lr\): 0.003 -> 0.5", {"train.tsv": GOOD_TSV}),
    Case("--resume with another --epsilon", _user("--resume", "{run}/checkpoint", "--epsilon", "2"),
         r"--epsilon \(privacy.epsilon\): 4.0 -> 2.0", {"train.tsv": GOOD_TSV}),
    Case("--resume with a missing rng file", _user("--resume", "{run}/checkpoint"), r"rng\.pt: missing from the checkpoint",
         {"train.tsv": GOOD_TSV, "@damage": "rm rng.pt"}),
    Case("--resume of a file", _user("--resume", "{d}/train.tsv"), r"is a file; expected a checkpoint directory",
         {"train.tsv": GOOD_TSV}),
    # ---- generative objective
    Case("--objective generate without --train-file", ["--objective", "generate"], r"--objective generate needs --train-file"),
    Case("--objective generate without a public source", ["--objective", "generate", "--train-file", "{d}/qa.jsonl",
                                                          "--model", "olmoe"], r"no public data declared",
         {"qa.jsonl": '{"prompt": "a", "answer": "b"}\n' * 30}),
    Case("--objective generate: --output-dir already holds a run", _gen("--output-dir", "{d}"),
         r"already holds a run .*--overwrite", {"qa.jsonl": QA_JSONL, "results.json": "{}"}),
    Case("--objective generate: --resume that does not exist", _gen("--resume", "{d}/nope"),
         r"no such checkpoint directory", {"qa.jsonl": QA_JSONL}),
    Case("--objective generate: --device cuda without CUDA", _gen("--device", "cuda"), r"--device cuda: CUDA is not available",
         {"qa.jsonl": QA_JSONL}),
    Case("--objective generate: --resume of a classification run", _gen("--resume", "{run}/checkpoint"),
         r"differs from the one that wrote the checkpoint: the objective changed: the checkpoint was written by a "
         r"--objective classify run, this run asks for --objective generate; model: 'switch_transformers' -> 'olmoe'",
         {"qa.jsonl": QA_JSONL}),
    # ---- predict
    Case("predict: --model without a model", ["predict", "--model", "{d}", "--input", "{d}/train.tsv"],
         r"--model .*: no model here", {"train.tsv": GOOD_TSV}, train=False),
    Case("predict: --input missing", ["predict", "--model", "{run}", "--input", "{d}/nope.tsv"], r"nope\.tsv: file not found",
         train=False),
    Case("predict: --batch-size 0", ["predict", "--model", "{run}", "--input", "{d}/train.tsv", "--batch-size", "0"],
         r"--batch-size must be an integer >= 1", {"train.tsv": GOOD_TSV}, train=False),
    Case("predict: --input without the text column", ["predict", "--model", "{run}", "--input", "{d}/t.tsv"],
         r"pass --text-column NAME", {"t.tsv": tsv(ROWS, header="review\tlabel")}, train=False),
    Case("predict: bad --output suffix", ["predict", "--model", "{run}", "--input", "{d}/train.tsv", "--output", "{d}/p.txt"],
         r"--output .*must end in \.csv or \.jsonl", {"train.tsv": GOOD_TSV}, train=False),
]


def _damage(ck, what):
    state_file = ck / "state.json"
    if what.startswith("rm "):
        (ck / what[3:]).unlink()
    elif what == "state.json":
        state_file.write_text(state_file.read_text()[:40])
    elif what == "ledger":
        state = json.loads(state_file.read_text())
        state["ledger"] = {"format": "not-a-ledger"}
        state_file.write_text(json.dumps(state))
    else:
        data = (ck / what).read_bytes()
        (ck / what).write_bytes(data[: len(data) // 2])


def run_case(case: Case, d, finished_run, capsys):
    run = finished_run
    files = dict(case.files)
    damage = files.pop("@damage", None)
    if damage is not None or "{run}/checkpoint" in " ".join(case.argv):
        run = d / "run_copy"
        shutil.copytree(finished_run, run)
        if damage is not None:
            _damage(run / "checkpoint", damage)
    for name, content in files.items():
        path = d / name
        if name.endswith(".gz") and isinstance(content, str):
            content = gzip.compress(content.encode())
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    argv = [a.replace("{d}", str(d)).replace("{run}", str(run)) for a in case.argv]
    if case.train:
        argv = ["train", "--model", "switch_transformers", *TINY, "--output-dir", str(d / "out"), *argv]
    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as exit_:  # argparse
        rc = exit_.code
    err = capsys.readouterr().err
    return rc, err


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_gives_one_clear_line(case, tmp_path, finished_run, capsys):
    rc, err = run_case(case, tmp_path, finished_run, capsys)
    assert rc not in (0, None), err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1, err
    assert re.search(case.expect, errors[0]), errors[0]


def test_the_suite_covers_at_least_45_classes():
    assert len({c.name for c in CASES}) == len(CASES) >= 45


if __name__ == "__main__":  # print the table of docs/ERRORS.md from a real run of every case
    import sys
    import tempfile
    from pathlib import Path

    class Cap:
        def readouterr(self):
            out = type("R", (), {})()
            out.err = sys.stderr.getvalue()
            sys.stderr.truncate(0)
            sys.stderr.seek(0)
            return out

    import io

    real_err = sys.stderr
    with tempfile.TemporaryDirectory() as base:
        sys.stderr = io.StringIO()
        d0 = Path(base) / "run"
        d0.mkdir()
        (d0 / "train.tsv").write_text(GOOD_TSV)
        main(["train", "--model", "switch_transformers", *TINY, "--train-file", str(d0 / "train.tsv"), "--public-size", "20", "--output-dir",
              str(d0 / "out")])
        rows = []
        for i, case in enumerate(CASES):
            d = Path(base) / f"c{i}"
            d.mkdir()
            sys.stderr.truncate(0)
            sys.stderr.seek(0)
            rc, err = run_case(case, d, d0 / "out", Cap())
            line = next((x for x in err.splitlines() if "error:" in x), err.strip())
            rows.append(f"| {case.name} | {rc} | `{line.replace(base, '…').replace('|', '/')}` |")
        sys.stderr = real_err
    print("| bad input | exit | message |\n|---|---|---|")
    print("\n".join(rows))
