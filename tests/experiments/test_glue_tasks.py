"""experiments/glue_tasks.py: the commands it runs, resuming finished runs, the summary JSON and table."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _results(task: str, method: str) -> dict:
    """A results.json as raptor train writes it (the fields the summary reads)."""
    private = method != "nonprivate"
    metrics = {"pearson": 0.31, "spearman": 0.30} if task == "stsb" else {"accuracy": 0.55}
    return {"main_metric": next(iter(metrics)), "final_metrics": metrics, "epsilon": 7.99 if private else "inf",
            "delta": 1e-5 if private else None, "sigma": {"shared": 1.2, "expert": 0.8} if private else
            {"shared": None, "expert": None}, "steps": 12, "sample_rate": 0.02, "total_seconds": 3.5,
            "seconds_per_step": 0.3, "trained_layers": [1], "data": {"private_records": 100},
            "evals": [{"step": 12, "metrics": metrics, "accuracy": None}]}


def test_every_command_parses_as_raptor_train_flags(experiment_script):
    from raptor.cli.train import add_arguments, config_from_args

    mod = experiment_script("glue_tasks")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    for name, task in mod.TASKS.items():
        for method in mod.METHODS:
            argv = mod.command(task, method, "glue", Path("runs") / name)
            args = parser.parse_args(argv)
            config = config_from_args(args)
            derived = task.derived_from is not None  # a CSV written from its GLUE task before the run
            assert (args.task, args.method, config.seed) == (None if derived else name, method, 0)
            if derived:
                assert args.train_file == str(Path("runs") / f"{name}_train.csv")
            # The documented GLUE public convention: a 5 % slice of the training split.
            assert args.public_size == 0.05 and args.public_file is None
            assert config.privacy.epsilon == (None if method == "nonprivate" else 8.0)
            assert mod.shown_command(argv).startswith(".venv/bin/raptor train " + (
                f"--train-file runs/{name}_train.csv" if derived else f"--task {name}"))


def test_main_runs_each_missing_run_once_and_writes_the_summary(tmp_path, monkeypatch, experiment_script):
    mod = experiment_script("glue_tasks")
    calls = []

    def fake_run(argv, out_dir, threads):
        calls.append((argv[argv.index("--task") + 1], argv[argv.index("--method") + 1], threads))
        task, method = calls[-1][:2]
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "results.json").write_text(json.dumps(_results(task, method)))
        meta = {"wall_seconds": 4.0, "cpu_seconds": 2.0, "threads": threads, "load_average_1min": [1.0, 1.0]}
        (out_dir / "run_meta.json").write_text(json.dumps(meta))
        return meta

    monkeypatch.setattr(mod, "run_one", fake_run)
    runs, out = tmp_path / "runs", tmp_path / "res" / "glue"
    # A finished run is reused, not rerun, and has no run_meta.json: its CPU seconds are unknown.
    done = runs / "wnli_nonprivate"
    done.mkdir(parents=True)
    (done / "results.json").write_text(json.dumps(_results("wnli", "nonprivate")))
    argv = ["--tasks", "stsb", "wnli", "--runs-dir", str(runs), "--out", str(out), "--threads", "1"]
    assert mod.main(argv) == 0
    assert calls == [("stsb", "nonprivate", 1), ("stsb", "raptor", 1), ("wnli", "raptor", 1)]
    summary = json.loads(out.with_suffix(".json").read_text())
    rows = {(r["task"], r["method"]): r for r in summary["runs"]}
    assert list(rows) == [("stsb", "nonprivate"), ("stsb", "raptor"), ("wnli", "nonprivate"), ("wnli", "raptor")]
    assert rows["stsb", "raptor"]["metrics"] == {"pearson": 0.31, "spearman": 0.30}
    assert rows["stsb", "raptor"]["epsilon"] == 7.99 and rows["stsb", "raptor"]["cpu_seconds"] == 2.0
    assert rows["wnli", "nonprivate"]["cpu_seconds"] is None
    assert "--output-dir " + str(runs / "stsb_raptor") in rows["stsb", "raptor"]["command"]
    table = out.with_suffix(".md").read_text().splitlines()
    assert len(table) == 2 + 4
    assert table[3].startswith("| stsb | raptor | pearson 0.310, spearman 0.300 | 7.99 | 1e-05 | 1.200, 0.800 | 12 | 4, 2 |")
    assert table[4].startswith("| wnli | nonprivate | accuracy 0.550 | ∞ | - | - | 12 | 4, - |")
    # A second call reruns nothing.
    calls.clear()
    assert mod.main(argv) == 0 and calls == []
