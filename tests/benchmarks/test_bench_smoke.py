"""Smoke test of benchmarks/engine_speed.py and `raptor bench`: the JSON schema, no timing assertions."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from raptor.cli.bench import _benchmark_module
from raptor.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    return _benchmark_module(ROOT / "benchmarks" / "engine_speed.py")


def _check_result(r: dict, kind: str) -> None:
    assert "error" not in r, r.get("error")
    assert r["kind"] == kind
    for step in ("plain", "private"):
        s = r["time_s"][step]
        assert set(s) == {"median", "q1", "q3", "iqr", "n"}
        assert s["median"] > 0 and s["q1"] <= s["median"] <= s["q3"] and s["n"] == r["config"]["reps"]
    assert math.isclose(r["time_ratio"], r["time_s"]["private"]["median"] / r["time_s"]["plain"]["median"])
    assert r["time_ratio_paired"] > 0 and r["cpu_time_ratio"] > 0
    assert set(r["cpu_s"]) == {"plain", "private"}
    mem = r["mem_bytes"]
    assert mem["method"].split("+")[0] in ("vmhwm-reset", "ru_maxrss")
    assert mem["plain_peak_increase"] >= 0 and mem["private_peak_increase"] >= 0 and mem["baseline_rss"] >= 0
    # tensor bytes: a training step allocates activations and gradients, so both peaks are positive
    assert mem["plain_peak_tensor"] > 0 and mem["private_peak_tensor"] > 0
    assert math.isclose(r["mem_ratio_tensor"], mem["private_peak_tensor"] / mem["plain_peak_tensor"])
    assert r["num_params"] > 0


def test_quick_run_schema(bench, tmp_path):
    configs = bench.plan(quick=True, families=["olmoe"], sweep_families=["switch_transformers"], experts=[2],
                         seq_lens=[8], warmup=0, reps=2, sweep_reps=1, threads=1, profile=["olmoe"], opacus=True)
    assert [c.tags for c in configs] == [("base",), ("sweep_experts",), ("sweep_seq",), ("opacus",)]
    report = bench.run_benchmark(configs, in_process=True, log=lambda s: None)
    report = json.loads(json.dumps(report))  # JSON-safe
    assert report["schema_version"] == bench.SCHEMA_VERSION and report["threads"] == 1
    results = report["results"]
    assert len(results) == 4
    for r in results[:3]:
        _check_result(r, "raptor_engine")
        assert {"forward", "backward", "reduce", "other"} <= set(r["phases_s"]["private"])
        assert {"forward", "backward"} <= set(r["phases_s"]["plain"])
        assert r["helpers_s"] and sum(r["helpers_calls"].values()) > 0
        assert set(r["helpers_s"]) == set(r["helpers_calls"])
        ops = r["aten_ops"]  # the device-free kernel-count proxy (issue 23)
        assert ops["plain"]["kernels"] > 0 and ops["private"]["kernels"] > 0
        assert math.isclose(r["kernel_ratio"], ops["private"]["kernels"] / ops["plain"]["kernels"])
        assert math.isclose(r["aten_op_ratio"], ops["private"]["all"] / ops["plain"]["all"])
    assert results[1]["config"]["num_experts"] == 2 and results[2]["config"]["seq_len"] == 8
    assert results[0]["num_groups"] == 1 + 2 * 4  # shared + (2 layers x 4 experts)
    prof = results[0]["profile"]["private"]
    assert prof and all({"op", "calls", "self_ms", "self_share"} <= set(p) for p in prof)
    _check_result(results[3], "opacus_dense")
    table = bench.report_table(results)
    assert "olmoe" in table and "opacus_dense" in table


def test_cli_bench_writes_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "--families", "qwen3_moe", "--no-opacus", "--reps", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [r["config"]["family"] for r in report["results"]] == ["qwen3_moe"]
    _check_result(report["results"][0], "raptor_engine")
    assert "time x" in capsys.readouterr().out


def test_interleaving_and_summary(bench):
    import _common

    calls = []
    times = _common.run_interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                                    warmup=1, reps=3, clocks={"c": iter(range(100)).__next__})
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]
    assert times == {"c": {"a": [1, 1, 1], "b": [1, 1, 1]}}
    s = _common.summary([1.0, 2.0, 3.0, 10.0])
    assert s["median"] == 2.5 and s["q1"] == 1.75 and s["q3"] == 4.75 and s["iqr"] == 3.0


def test_bench_rejects_bad_threads():
    assert main(["bench", "--threads", "0"]) == 2


def test_peak_tensor_bytes_counts_live_storage(bench):
    import torch

    import _common

    x = torch.randn(256, 256, requires_grad=True)  # exists before the step: not counted
    mb = 256 * 256 * 4

    def step():
        y = (x @ x).relu()  # x@x freed once relu's output exists: peak 2 matrices here
        z = y @ x
        z.sum().backward()  # grads of y and x (x.grad stays) on top of y, z

    peak = _common.peak_tensor_bytes(step)
    assert 2 * mb <= peak <= 7 * mb
    assert _common.peak_tensor_bytes(lambda: torch.zeros(1000)) == 4000


def test_update_speed_quick_writes_every_method_with_phases(tmp_path):
    """benchmarks/update_speed.py --quick: one row per method, phases that add up, a ratio to nonprivate."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("raptor_benchmarks_update_speed", ROOT / "benchmarks" / "update_speed.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "update.json"
    assert mod.main(["--quick", "--updates", "1", "--warmup", "0", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["results"]) == {"nonprivate", "raptor", "dpsgd", "dp-lora"}
    assert report["results"]["nonprivate"]["ratio_to_nonprivate"] == 1.0
    for r in report["results"].values():
        p = r["phases_s"]
        assert p["engine"] > 0 and p["optimizer"] > 0 and p["noise_and_division"] > 0
        assert math.isclose(sum(v for k, v in p.items() if k != "total"), p["total"], rel_tol=1e-6)
        assert r["peak_update_tensor_bytes"] > 0 and r["evaluate_s"] > 0
        assert r["setup_s"]["public_routing"] > 0


def test_engine_revision_is_bounded_and_null_without_git(bench, monkeypatch, tmp_path):
    import subprocess

    real_run, seen = subprocess.run, []

    def bounded(cmd, *args, **kwargs):
        seen.append(kwargs.get("timeout"))
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", bounded)
    rev = bench._engine_revision()
    assert seen and all(t is not None and t > 0 for t in seen), "a git call without a timeout"
    assert set(rev) == {"commit", "engine_sources_modified", "per_sample_sha256"}

    for error in (FileNotFoundError("git"), subprocess.TimeoutExpired("git", 10)):
        def failing(*args, error=error, **kwargs):
            raise error

        monkeypatch.setattr(subprocess, "run", failing)
        rev = bench._engine_revision()
        assert rev["commit"] is None and rev["engine_sources_modified"] is None

    monkeypatch.setattr(subprocess, "run", real_run)
    (tmp_path / "benchmarks").mkdir()  # a copy outside any repository: git exits non-zero
    monkeypatch.setattr(bench, "_HERE", tmp_path / "benchmarks")
    rev = bench._engine_revision()
    assert rev["commit"] is None and rev["engine_sources_modified"] is None
