"""Issue 15 item 2: an UNSEEDED run killed with SIGKILL resumes to the same final model as an
uninterrupted run given the same generator states (both continue one checkpoint of a killed run)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from safetensors.torch import load_file


def _write(path: Path, rows) -> None:
    path.write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in rows))


def _step(ck: Path) -> int | None:
    try:
        return json.loads((ck / "state.json").read_text())["step"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return None


def _start(args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.Popen([sys.executable, "-m", "raptor.cli.main", "train", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _kill_at(proc, ck: Path, at_least: int, timeout: float = 600) -> bool:
    """SIGKILL ``proc`` once ``ck`` holds a checkpoint of step >= at_least; False if it ended first."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        step = _step(ck)
        if step is not None and step >= at_least:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.01)
    proc.kill()
    raise AssertionError("the run did not reach its checkpoint in time")


def _run(args) -> None:
    proc = _start(args)
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err


def test_unseeded_run_killed_with_sigkill_resumes_exactly(tmp_path):
    words = ["good", "bad", "great", "awful", "fine", "poor", "nice", "dull"]
    rows = [(f"{words[i % 8]} movie {words[(3 * i) % 8]} plot", i % 2) for i in range(140)]
    _write(tmp_path / "train.tsv", rows[:120])
    _write(tmp_path / "dev.tsv", rows[120:])
    steps = 40
    common = ["--train-file", str(tmp_path / "train.tsv"), "--validation-file", str(tmp_path / "dev.tsv"),
              "--public-size", "20", "--vocab-size", "60", "--max-length", "12", "--hidden-size", "16",
              "--batch-size", "16", "--micro-batch-size", "8", "--no-progress", "--epsilon", "4",
              "--steps", str(steps), "--checkpoint-every", "3"]  # no --seed: OS CSPRNG, secure mode

    # 1. an unseeded run, killed as soon as it has a checkpoint (its random init and generators are in it)
    first = tmp_path / "first"
    proc = _start(common + ["--output-dir", str(first)])
    assert _kill_at(proc, first / "checkpoint", 0), proc.stderr.read()
    start = _step(first / "checkpoint")
    saved = tmp_path / "saved_checkpoint"
    shutil.copytree(first / "checkpoint", saved)

    # 2. the reference: continue that checkpoint without interruption
    ref = tmp_path / "ref"
    _run(common + ["--output-dir", str(ref), "--resume", str(saved)])

    # 3. continue it again, SIGKILL mid-run, resume the killed run's own checkpoint
    killed = tmp_path / "killed"
    shutil.copytree(saved, tmp_path / "saved2")
    proc = _start(common + ["--output-dir", str(killed), "--resume", str(tmp_path / "saved2")])
    was_killed = _kill_at(proc, killed / "checkpoint", start + 3)
    _run(common + ["--output-dir", str(killed), "--resume", str(killed / "checkpoint")])

    a, b = load_file(str(ref / "model" / "model.safetensors")), load_file(str(killed / "model" / "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert (a[k] == b[k]).all(), k  # bit-identical final models
    ra, rb = (json.loads((d / "results.json").read_text()) for d in (ref, killed))
    assert ra["steps"] == rb["steps"] == steps and ra["epsilon"] == rb["epsilon"]
    assert ra["streams"] == rb["streams"]  # the same public statistics (layers, shares, clip norms)
    assert ra["config"]["seed"] is None and ra["config"]["privacy"]["secure_rng"] is True
    assert was_killed or start + 3 >= steps  # the second kill really interrupted training
