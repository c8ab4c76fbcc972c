"""experiments/sst2_methods.py: picking the best learning rate and drawing the figure."""

from __future__ import annotations


def _row(tag, lr, acc, eps):
    evals = [{"step": 10, "accuracy": acc - 0.1, "epsilon": eps}, {"step": 20, "accuracy": acc, "epsilon": eps}]
    return {"tag": tag, "lr": lr, "final_accuracy": acc, "evals": evals, "epsilon": eps, "delta": 1e-6, "steps": 20}


def test_plot_writes_a_png(tmp_path, experiment_script):
    mod = experiment_script("sst2_methods")
    best = {"nonprivate": _row("nonprivate", 1e-3, 0.8, "inf"), "dpsgd": _row("dpsgd", 1e-3, 0.7, 7.99),
            "raptor": _row("raptor", 3e-3, 0.72, 7.99)}
    out = mod.plot(best, tmp_path / "fig.png", title="test")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_main_reuses_finished_runs_and_keeps_the_best_lr(tmp_path, monkeypatch, experiment_script):
    mod = experiment_script("sst2_methods")
    accs = {("raptor", 0.001, 0): 0.6, ("raptor", 0.003, 0): 0.7, ("raptor", 0.003, 1): 0.8, ("raptor", 0.003, 2): 0.9}
    calls = []

    def fake_run(args, method, lr, extra, tag, seed=None):
        seed = args.seed if seed is None else seed
        calls.append((method, lr, seed))
        return {**_row(tag, lr, accs[(method, lr, seed)], 7.9), "method": method, "extra": extra, "seed": seed,
                "sigma": {"shared": 1.0}, "seconds_per_step": 0.1}

    monkeypatch.setattr(mod, "run_one", fake_run)
    assert mod._num("inf", ".3f") == "inf" and mod._num(None, ".3f") == "-" and mod._num(7.99, ".1f") == "8.0"
    out = tmp_path / "r.json"
    argv = ["--methods", "raptor", "--lrs", "0.001", "0.003", "--extra-seeds", "1", "2", "--out", str(out),
            "--plot", str(tmp_path / "f.png")]
    assert mod.main(argv) == 0
    import json

    res = json.loads(out.read_text())
    best = res["best"]["raptor"]
    assert best["lr"] == 0.003 and len(res["runs"]) == 2
    # Extra seeds rerun only the best lr.
    assert calls[2:] == [("raptor", 0.003, 1), ("raptor", 0.003, 2)]
    assert best["seed_accuracies"] == [0.7, 0.8, 0.9]
    assert abs(best["mean_accuracy"] - 0.8) < 1e-12 and abs(best["std_accuracy"] - 0.1) < 1e-12
    assert (tmp_path / "f.png").stat().st_size > 10_000
