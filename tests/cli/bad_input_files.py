"""What the bad-input tests of the CLI share (test_bad_inputs, test_errors_every_command, test_errors_pretrain_audit_predict_labels, test_errors_fine_tune_lock_resume): 60
labelled sentences, their TSV, the flags of a one-step run on a tiny model, and a CLI run with its one
error line checked."""

from __future__ import annotations

import re

from raptor.cli.main import main

ROWS = [(f"{w} movie {v} plot", i % 2) for i, (w, v) in
        enumerate(zip(["good", "bad", "great", "awful", "fine", "poor"] * 10, ["nice", "dull", "fun"] * 20))]


def tsv(rows, header="sentence\tlabel"):
    return header + "\n" + "".join("\t".join(map(str, r)) + "\n" for r in rows)


GOOD_TSV = tsv(ROWS)
TINY = ["--model", "switch_transformers", "--set", "model.vocab_size=60", "--max-length", "12", "--set", "model.hidden_size=16", "--set", "performance.micro_batch_size=8",
        "--no-progress", "--steps", "1", "--seed", "1", "--batch-size", "8", "--epsilon", "4"]


def run_cli(argv, capsys):
    """(exit code, stdout, stderr) of ``raptor ARGV`` in process."""
    capsys.readouterr()
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exit_:
        rc = exit_.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_error_line(rc, err, pattern):
    """Exit code 2, no traceback, exactly one ``error:`` line, and it matches ``pattern``."""
    assert rc == 2, (rc, err)
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    assert re.search(pattern, lines[0]), lines[0]
