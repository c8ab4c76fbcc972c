"""experiments/gpu_grid.sh, the one-command GPU grid: its CPU dry run (a tiny grid, real training)
packs finished cells that record their device, and a shard that fails stops the whole run at once
with exit 1 and its log's tail (a GPU lease once recorded an error in every cell for 9 minutes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GLUE = ROOT.parent / "shared" / "data" / "glue"
SCRIPT = ROOT / "experiments" / "gpu_grid.sh"
TINY = ["--max-train", "48", "--batch-size", "16", "--epochs", "1", "--methods", "raptor", "--epsilons", "8",
        "--seeds", "0", "--public-size", "48", "--selection-size", "24", "--micro-batch-size", "16"]

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="needs bash and coreutils' timeout")


def _run(tmp_path: Path, data_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "GPU_GRID_POLL": "1"}
    args = ["bash", str(SCRIPT), "--data-dir", str(data_dir), "--out", str(tmp_path / "out"), "--limit", "240",
            "--device", "cpu", "--shards", "1", "--", "--results-dir", str(tmp_path / "res"), *TINY, *extra]
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(not (GLUE / "SST-2" / "train.tsv").is_file(), reason="needs ../shared/data/glue/SST-2")
def test_cpu_dry_run_packs_finished_cells_with_their_device(tmp_path):
    proc = _run(tmp_path, GLUE)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with tarfile.open(tmp_path / "out" / "grid.tar.gz") as tar:
        names = [Path(n).name for n in tar.getnames()]
        assert "shard0.log" in names
        member = next(m for m in tar.getmembers() if Path(m.name).name == "sst2_paper.jsonl")
        rows = [json.loads(line) for line in tar.extractfile(member).read().decode().splitlines()]
    assert len(rows) == 3 and all(r["status"] == "ok" for r in rows)  # 2 tune cells, 1 final
    assert {r["result"]["device"] for r in rows} == {"cpu"}
    assert list((tmp_path / "out").iterdir()) == [tmp_path / "out" / "grid.tar.gz"]  # one file comes back


def test_a_failing_shard_stops_the_run_with_its_log(tmp_path):
    proc = _run(tmp_path, tmp_path / "no-such-glue")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "shard 0 FAILED" in proc.stdout
    assert "no-such-glue" in proc.stdout  # the log's tail names the cause


def test_a_shard_failing_between_two_polls_is_not_missed(tmp_path):
    """The poll loop stops when no job runs; a shard that failed after the loop's last reap used to
    end the run with exit 0 (seen once under load; with a poll of 0 the old loop missed it 5 runs of
    6). A stand-in Python that fails after 0.3 s must give exit 1 with its log, every time."""
    fake = tmp_path / "fake_python"
    fake.write_text("#!/usr/bin/env bash\nsleep 0.3; echo 'planted failure' >&2; exit 3\n")
    fake.chmod(0o755)
    env = {**os.environ, "PYTHON": str(fake), "GPU_GRID_POLL": "0"}
    for attempt in range(6):
        proc = subprocess.run(["bash", str(SCRIPT), "--data-dir", str(tmp_path), "--out", str(tmp_path / "out"),
                               "--device", "cpu", "--shards", "1", "--", "--results-dir", str(tmp_path / "res")],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1, (attempt, proc.stdout[-2000:], proc.stderr[-2000:])
        assert "shard 0 FAILED (exit 3)" in proc.stdout and "planted failure" in proc.stdout
