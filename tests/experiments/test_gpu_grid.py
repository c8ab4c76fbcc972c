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
