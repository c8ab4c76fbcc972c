"""Smoke test of benchmarks/user_path.py (the path `raptor train` runs, end to end): its JSON
schema and that every phase it names was timed; no timing assertion (ratios are the benchmark's)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_writes_every_phase_and_the_ratios(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import importlib.util

    spec = importlib.util.spec_from_file_location("user_path_under_test", ROOT / "benchmarks" / "user_path.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "user_path_under_test", mod)
    spec.loader.exec_module(mod)
    out = tmp_path / "user_path.json"
    assert mod.main(["--quick", "--settings", "lora", "--threads", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    for method in ("raptor", "nonprivate"):
        r = report["runs"]["lora"][method]
        assert "error" not in r, r.get("error")
        assert r["total_s"] > 0 and r["update_s"]["median"] > 0
    assert report["runs"]["lora"]["raptor"]["library_update_s"]["median"] > 0
    ratios = report["ratios"]
    assert set(ratios) == {"end_to_end", "cli_over_library"}  # full/lora needs the full setting too
    for name, by in ratios.items():
        assert by["lora"]["wall"] > 0 and by["lora"]["target"] == mod.TARGETS[name]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))
