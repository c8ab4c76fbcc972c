"""Loading the shipped masked-LM checkpoint into a classifier (a new head, on purpose): transformers'
UNEXPECTED / MISSING load report is replaced by one raptor line, for that call only."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

from raptor.shipped import shipped_dir

SCRIPT = textwrap.dedent("""
    import logging, sys
    from raptor.moe.models import HF_LOAD_REPORT_LOGGER, load_model
    logger = logging.getLogger(HF_LOAD_REPORT_LOGGER)
    before = list(logger.filters)
    load_model(sys.argv[1], num_labels=2)
    assert logger.filters == before, "the report filter leaked"
    print("@@after@@", file=sys.stderr, flush=True)
    logger.warning("probe LOAD REPORT after the call")  # a later report is logged as before
""")


def _load(model: str) -> tuple[str, str]:
    """(stderr before the end of load_model, stderr after it) of a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", SCRIPT, model], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    during, _, after = out.stderr.partition("@@after@@")
    return during, after


def test_the_new_head_prints_one_raptor_line_instead_of_the_hf_report():
    during, after = _load("switch-public-tiny")
    for word in ("LOAD REPORT", "UNEXPECTED", "MISSING"):
        assert word not in during, during
    lines = [line for line in during.splitlines() if line.startswith("raptor:")]
    assert len(lines) == 1, during
    assert "switch-public-tiny is a SwitchForMaskedLM checkpoint" in lines[0] and "head is new" in lines[0]
    assert "classifier.weight" in lines[0] and "lm_bias" in lines[0]
    assert "probe LOAD REPORT after the call" in after  # the filter was for that call only


def test_a_checkpoint_of_the_same_head_class_keeps_the_hf_report(tmp_path):
    # the same weights declared as a classifier checkpoint: a missing head is then not on purpose
    model = tmp_path / "model"
    shutil.copytree(shipped_dir() / "switch-public-tiny", model)
    config = json.loads((model / "config.json").read_text())
    config["architectures"] = ["SwitchForSequenceClassification"]
    (model / "config.json").write_text(json.dumps(config))
    during, _ = _load(str(model))
    assert "LOAD REPORT" in during and "MISSING" in during
    assert not any(line.startswith("raptor:") for line in during.splitlines())
