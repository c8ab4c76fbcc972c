"""benchmarks/memory_model.py: the formulas, and the fit verdicts the docs quote."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("memory_model", ROOT / "benchmarks" / "memory_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_formulas_and_verdicts():
    mm = _module()
    row = mm.estimate(1e9, 1024, 10, 2048, 2, trainable=1e9, b=1, T=100)
    assert row["weights_gib"] == pytest.approx(2e9 / 2**30)
    assert row["trainable_state_gib"] == pytest.approx(20e9 / 2**30)
    assert row["activations_gib"] == pytest.approx(100 * 10 * (16 * 1024 + 4 * 2048) * 2 / 2**30)
    rows = mm.table()["rows"]
    assert set(rows) == {"switch_transformers", "olmoe", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2",
                         "deepseek_v3"}
    fits = {f: (r["full"]["fits_80gb"], r["lora"]["fits_80gb"]) for f, r in rows.items()}
    assert fits["switch_transformers"] == (True, True)
    assert fits["olmoe"] == (False, True)
    assert fits["mixtral"] == (False, False) and fits["deepseek_v3"] == (False, False)


def test_gpu_check_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu_check.sh")], check=True, timeout=60)
