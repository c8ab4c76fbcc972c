"""Issue 15 item 2: an UNSEEDED run killed with SIGKILL resumes to the same final model as an
uninterrupted run given the same generator states (both continue one checkpoint of a killed run).

Every process started here is bounded: a run that hangs fails the test after RUN_TIMEOUT with its
stderr, a kill waits at most EXIT_TIMEOUT, and teardown kills anything left running."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from raptor.errors import CheckpointError
from raptor.training.saving.checkpoint import resolve_checkpoint


def _write(path: Path, rows) -> None:
    path.write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in rows))


def _step(ck: Path) -> int | None:
    # resolve_checkpoint: a SIGKILL between the two renames of a checkpoint swap leaves only
    # <ck>.old, which is what a resume reads; the test reads the same checkpoint
    try:
        return json.loads((resolve_checkpoint(ck) / "state.json").read_text())["step"]
    except (CheckpointError, FileNotFoundError, json.JSONDecodeError, KeyError):
        return None


#: each `raptor train` below takes about 50 s on a loaded 2-core machine: past this it is hung
RUN_TIMEOUT = 600.0
#: a SIGKILLed (or killed-for-timeout) process must be gone within this
EXIT_TIMEOUT = 60.0


@pytest.fixture
def processes():
    """Every process the test starts; any still running at teardown (a failed assertion) is killed."""
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=EXIT_TIMEOUT)


def _tail(log: Path, n: int = 3000) -> str:
    return log.read_text(errors="replace")[-n:] if log.exists() else "(no stderr)"


def _train(*args: str) -> list[str]:
    return [sys.executable, "-m", "raptor.cli.main", "train", "--model", "switch_transformers", *args]


def _start(processes, cmd: list[str], log: Path) -> subprocess.Popen:
    """``cmd`` with this interpreter's path; stderr goes to ``log`` (a file, never a pipe that nobody
    reads while the run goes on, which would block it once full)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
    processes.append(proc)
    return proc


def _stop(proc: subprocess.Popen, log: Path, why: str) -> None:
    """SIGKILL ``proc`` and wait (bounded) for it to end."""
    proc.send_signal(signal.SIGKILL)
    try:
        proc.wait(timeout=EXIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{why}; and the process did not exit within {EXIT_TIMEOUT:.0f} s of SIGKILL. "
                             f"stderr:\n{_tail(log)}") from None


def _kill_at(proc, ck: Path, at_least: int, log: Path, timeout: float = RUN_TIMEOUT) -> bool:
    """SIGKILL ``proc`` once ``ck`` holds a checkpoint of step >= at_least; False if it ended first."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        step = _step(ck)
        if step is not None and step >= at_least:
            _stop(proc, log, f"killing the run at step {step}")
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.01)
    why = f"the run did not reach a checkpoint of step >= {at_least} within {timeout:.0f} s (hung?)"
    _stop(proc, log, why)
    raise AssertionError(f"{why}; killed it. stderr:\n{_tail(log)}")


def _run(processes, cmd: list[str], log: Path, timeout: float = RUN_TIMEOUT) -> None:
    proc = _start(processes, cmd, log)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        why = f"{' '.join(cmd[1:4])} did not finish within {timeout:.0f} s (hung?)"
        _stop(proc, log, why)
        raise AssertionError(f"{why}; killed it. stderr:\n{_tail(log)}") from None
    assert proc.returncode == 0, _tail(log)


def test_unseeded_run_killed_with_sigkill_resumes_exactly(tmp_path, processes):
    words = ["good", "bad", "great", "awful", "fine", "poor", "nice", "dull"]
    rows = [(f"{words[i % 8]} movie {words[(3 * i) % 8]} plot", i % 2) for i in range(140)]
    _write(tmp_path / "train.tsv", rows[:120])
    _write(tmp_path / "dev.tsv", rows[120:])
    steps = 40
    common = ["--model", "switch_transformers", "--train-file", str(tmp_path / "train.tsv"), "--validation-file", str(tmp_path / "dev.tsv"),
              "--public-size", "20", "--set", "model.vocab_size=60", "--max-length", "12", "--set", "model.hidden_size=16",
              "--batch-size", "16", "--set", "performance.micro_batch_size=8", "--no-progress", "--epsilon", "4",
              "--steps", str(steps), "--set", "run.checkpoint_every=3"]  # no --seed: OS CSPRNG, secure mode

    # 1. an unseeded run, killed as soon as it has a checkpoint (its random init and generators are in it)
    first = tmp_path / "first"
    proc = _start(processes, _train(*common, "--output-dir", str(first)), tmp_path / "first.err")
    assert _kill_at(proc, first / "checkpoint", 0, tmp_path / "first.err"), _tail(tmp_path / "first.err")
    start = _step(first / "checkpoint")
    assert start is not None, _tail(tmp_path / "first.err")
    saved = tmp_path / "saved_checkpoint"
    shutil.copytree(resolve_checkpoint(first / "checkpoint"), saved)

    # 2. the reference: continue that checkpoint without interruption
    ref = tmp_path / "ref"
    _run(processes, _train(*common, "--output-dir", str(ref), "--resume", str(saved)), tmp_path / "ref.err")

    # 3. continue it again, SIGKILL mid-run, resume the killed run's own checkpoint
    killed = tmp_path / "killed"
    shutil.copytree(saved, tmp_path / "saved2")
    proc = _start(processes, _train(*common, "--output-dir", str(killed), "--resume", str(tmp_path / "saved2")),
                  tmp_path / "killed.err")
    was_killed = _kill_at(proc, killed / "checkpoint", start + 3, tmp_path / "killed.err")
    _run(processes, _train(*common, "--output-dir", str(killed), "--resume", str(killed / "checkpoint")),
         tmp_path / "resumed.err")

    a, b = load_file(str(ref / "model" / "model.safetensors")), load_file(str(killed / "model" / "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert (a[k] == b[k]).all(), k  # bit-identical final models
    ra, rb = (json.loads((d / "results.json").read_text()) for d in (ref, killed))
    assert ra["steps"] == rb["steps"] == steps and ra["epsilon"] == rb["epsilon"]
    assert ra["streams"] == rb["streams"]  # the same public statistics (layers, shares, clip norms)
    assert ra["config"]["seed"] is None and ra["config"]["privacy"]["secure_rng"] is True
    assert was_killed or start + 3 >= steps  # the second kill really interrupted training


HANG = [sys.executable, "-c", "import sys, time; print('still going', file=sys.stderr, flush=True); time.sleep(600)"]


def test_a_hung_run_fails_with_a_clear_message_instead_of_hanging(tmp_path, processes):
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"did not finish within 2 s \(hung\?\); killed it") as err:
        _run(processes, HANG, tmp_path / "hang.err", timeout=2)
    assert "still going" in str(err.value)  # its stderr is in the message
    proc = _start(processes, HANG, tmp_path / "hang2.err")
    with pytest.raises(AssertionError, match=r"did not reach a checkpoint of step >= 0 within 2 s"):
        _kill_at(proc, tmp_path / "no_checkpoint", 0, tmp_path / "hang2.err", timeout=2)
    assert all(p.poll() is not None for p in processes) and time.monotonic() - started < 60
