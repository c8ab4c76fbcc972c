"""Loading the shipped masked-LM checkpoint into a classifier (a new head, on purpose): transformers'
UNEXPECTED / MISSING load report is replaced by one raptor line, for that call only."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest

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


def test_the_new_head_line_is_printed_once_per_process(capsys):
    """A grid loads the same checkpoint for every cell: the line once, not once per cell (the line
    names the new parameters, not the head's size, so a regression head repeats it too)."""
    from raptor.moe import models

    models._announced.clear()
    models.load_model("switch-public-tiny", num_labels=2)
    models.load_model("switch-public-tiny", num_labels=2)
    first = [line for line in capsys.readouterr().err.splitlines() if line.startswith("raptor:")]
    assert len(first) == 1 and "head is new" in first[0]
    models.load_model("switch-public-tiny", num_labels=1)  # a regression head: the same new parameters
    models.load_model("switch-public-tiny", num_labels=2)
    assert not [line for line in capsys.readouterr().err.splitlines() if line.startswith("raptor:")]


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


@pytest.fixture()
def report_log():
    """(logger, messages): the load-report logger at WARNING, with a handler that records what passes."""
    from raptor.moe.models import HF_LOAD_REPORT_LOGGER

    logger = logging.getLogger(HF_LOAD_REPORT_LOGGER)
    messages: list[str] = []
    lock = threading.Lock()

    class Record(logging.Handler):
        def emit(self, record):
            with lock:
                messages.append(record.getMessage())

    handler, level, before = Record(), logger.level, list(logger.filters)
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    yield logger, messages
    logger.removeHandler(handler)
    logger.setLevel(level)
    assert logger.filters == before, "the report filter leaked"


def test_the_quiet_call_drops_only_its_own_threads_report(report_log):
    """Thread A quiets its load; thread B's report, logged while A is inside, is kept."""
    from raptor.moe.models import without_load_report

    logger, messages = report_log
    inside, b_logged = threading.Barrier(2), threading.Barrier(2)

    def a():
        with without_load_report():
            inside.wait(timeout=30)
            b_logged.wait(timeout=30)
            logger.warning("LOAD REPORT from A")
            logger.warning("another record from A")

    def b():
        inside.wait(timeout=30)
        logger.warning("LOAD REPORT from B")
        b_logged.wait(timeout=30)

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert sorted(messages) == ["LOAD REPORT from B", "another record from A"]


def test_concurrent_quiet_calls_neither_leak_nor_lose_reports(report_log):
    """Threads entering and leaving the quiet block at once: every report logged inside a block is
    dropped, every one logged outside is kept, and the filter is gone at the end (the fixture)."""
    from raptor.moe.models import without_load_report

    logger, messages = report_log
    n_threads, rounds = 4, 200
    start = threading.Barrier(n_threads)

    def work(i):
        start.wait(timeout=30)
        for r in range(rounds):
            with without_load_report():
                logger.warning(f"LOAD REPORT inside {i}/{r}")
                with without_load_report():  # nested: still quiet, and quiet again after the inner block
                    pass
                logger.warning(f"LOAD REPORT inside after nesting {i}/{r}")
            logger.warning(f"LOAD REPORT outside {i}/{r}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so that the blocks really interleave
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        sys.setswitchinterval(interval)
    assert not any(t.is_alive() for t in threads)
    assert not [m for m in messages if "inside" in m]
    assert len(messages) == n_threads * rounds and all("outside" in m for m in messages)
