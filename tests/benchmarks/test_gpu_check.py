"""``benchmarks/gpu_check.sh --device cpu``: the CI-sized run of the GPU check (issue 23).

It runs its steps in order (training first, then ``raptor check``, then speed), every engine config in
one process, and rewrites ``summary.json`` after every step, so a stop at any point leaves one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _steps_module():
    spec = importlib.util.spec_from_file_location("gpu_check_steps", ROOT / "benchmarks" / "gpu_check_steps.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_summary_is_written_after_each_step_and_survives_a_stop(tmp_path):
    steps = _steps_module()
    s = steps.summarise(tmp_path, "train_1proc_float32", 0, 3.0)
    assert (tmp_path / "summary.json").exists() and s["passed"] is True
    (tmp_path / "check_olmoe_float32.json").write_text(json.dumps({"passed": False}))
    s = steps.summarise(tmp_path, "checks", 124, 90.0)  # a step stopped by its time limit
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert [x["step"] for x in on_disk["steps"]] == ["train_1proc_float32", "checks"]
    assert on_disk["steps"][1]["outcome"] == "timeout" and on_disk["passed"] is False
    assert on_disk["checks"] == {"check_olmoe_float32": False} and s == on_disk


@pytest.mark.slow
def test_gpu_check_cpu_mode_runs_every_step_in_order(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, GPU_CHECK_TORCHRUN="0")
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--device", "cpu", "--out", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [s["step"] for s in summary["steps"]] == ["train_1proc_float32", "train_1proc_bfloat16", "checks",
                                                     "engine_speed"]
    assert summary["passed"] and all(s["outcome"] == "ok" for s in summary["steps"])
    assert len(summary["checks"]) == 14 and all(summary["checks"].values())
    assert set(summary["train"]) == {"train_1proc_float32", "train_1proc_bfloat16"}
    (rows,) = summary["engine_speed"].values()  # one process, one JSON: both dtypes
    assert {r["config"].endswith("bfloat16]") for r in rows} == {True, False}
    assert all(r["kernel_ratio"] > 0 and r["time_ratio"] > 0 for r in rows)
    speed = json.loads((tmp_path / "engine_speed_cpu.json").read_text())
    assert speed["complete"] is True and speed["in_process"] is True
