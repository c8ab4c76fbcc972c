"""``raptor check FAMILY [--json]``."""

from __future__ import annotations

import json

from raptor.cli.main import main


def test_check_cli_json_passes(capsys):
    rc = main(["check", "mixtral", "--json", "--grouping", "roles", "--no-lora", "--batch-size", "3",
               "--seq-len", "6"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["passed"] is True
    (check,) = out["checks"]
    assert check["grouping"] == "roles" and check["max_rel_sum_error"] <= 1e-4


def test_check_cli_fails_with_impossible_tolerance(capsys):
    rc = main(["check", "olmoe", "--grouping", "dense", "--no-lora", "--batch-size", "3", "--seq-len", "6",
               "--tolerance", "1e-30"])  # positive, but below float64 rounding: every row fails
    assert rc == 1
    assert "FAIL" in capsys.readouterr().out


def test_check_cli_float32_table(capsys):
    rc = main(["check", "qwen3_moe", "--dtype", "float32", "--grouping", "dense", "--no-lora", "--batch-size", "3",
               "--seq-len", "6"])
    out = capsys.readouterr().out
    assert rc == 0 and "float32 tiny model" in out and "PASS" in out
