"""Fixtures of the CLI tests."""

from __future__ import annotations

import pytest
from bad_input_files import GOOD_TSV, TINY

from raptor.cli.main import main


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """The output directory of a finished one-step run on a user TSV (20 records declared public)."""
    d = tmp_path_factory.mktemp("run")
    (d / "train.tsv").write_text(GOOD_TSV)
    assert main(["train", "--model", "switch_transformers", *TINY, "--train-file", str(d / "train.tsv"), "--public-size", "20",
                 "--output-dir", str(d / "out")]) == 0
    return d / "out"
