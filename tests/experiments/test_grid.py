"""The resumable grid: skip finished cells, survive a cut line, never lose a cell; tuning and summary."""

from __future__ import annotations

import json
import math

import pytest

from raptor.analysis.grid import Cell, append_record, done_keys, read_records, run_grid
from raptor.analysis.paper_table import margins, markdown_table, select_best, summarize
from raptor.errors import ConfigError


def _cells():
    return [Cell("m", "sst2", meth, eps, seed, hparams={"lr": 1e-3})
            for meth in ("dpsgd", "raptor") for eps in (1.0, 8.0) for seed in (0, 1)]


def test_cell_key_is_stable_and_order_free():
    a = Cell("m", "t", "raptor", 1.0, 0, hparams={"lr": 1e-3, "r": 0.3})
    b = Cell("m", "t", "raptor", 1.0, 0, hparams={"r": 0.3, "lr": 1e-3})
    assert a == b and a.key == b.key
    assert a.key != Cell("m", "t", "raptor", 1.0, 1, hparams={"lr": 1e-3, "r": 0.3}).key
    assert Cell.from_dict(a.to_dict()) == a
    with pytest.raises(ConfigError, match="stage"):
        Cell("m", "t", "raptor", 1.0, 0, stage="other")


def test_rerun_skips_finished_cells(tmp_path):
    path = tmp_path / "grid.jsonl"
    calls = []

    def run(cell):
        calls.append(cell)
        return {"metric": cell.seed + (cell.epsilon or 0), "epsilon": cell.epsilon}

    cells = _cells()
    first = run_grid(cells[:3], path, run, progress=False, revision="abc")
    assert len(first) == 3 and len(calls) == 3
    records = run_grid(cells, path, run, progress=False, revision="abc")
    assert len(calls) == len(cells)  # only the 5 new ones ran the second time
    assert {r["key"] for r in records} == {c.key for c in cells}
    assert all(r["git_revision"] == "abc" and r["wall_seconds"] >= 0 for r in records)
    run_grid(cells, path, run, progress=False)
    assert len(calls) == len(cells)  # nothing left to do


def test_claims_skip_a_held_cell_and_reread_what_is_finished_once_the_claim_is_ours(tmp_path, capsys):
    from raptor.analysis.claims import claimed

    path, claims = tmp_path / "grid.jsonl", tmp_path / "claims"
    cells = _cells()[:3]
    calls = []
    reads = []

    def finished():  # cell 0 is finished elsewhere after this process's first read
        reads.append(1)
        return set() if len(reads) == 1 else {cells[0].key}

    with claimed(claims, cells[1].key) as held:  # held as if by another process
        assert held
        records = run_grid(cells, path, lambda c: calls.append(c) or {"metric": 1.0}, progress=False,
                           revision="r", claims=claims, finished=finished)
    assert calls == [cells[2]] and [r["key"] for r in records] == [cells[2].key]
    assert "skipped " in capsys.readouterr().out
    assert not list(claims.iterdir())  # every claim released


def test_crash_keeps_finished_cells_and_rerun_retries(tmp_path):
    path = tmp_path / "grid.jsonl"
    cells = _cells()

    def boom_on_fourth(cell):
        if cell == cells[3]:
            raise RuntimeError("simulated crash")
        return {"metric": 1.0}

    with pytest.raises(RuntimeError, match="simulated"):
        run_grid(cells, path, boom_on_fourth, progress=False, revision="r")
    assert len(read_records(path)) == 3
    ran = []
    run_grid(cells, path, lambda c: ran.append(c) or {"metric": 2.0}, progress=False, revision="r")
    assert ran[0] == cells[3] and len(ran) == len(cells) - 3


def test_recorded_errors_are_retried(tmp_path):
    path = tmp_path / "grid.jsonl"
    cell = Cell("m", "t", "dpsgd", 1.0, 0)

    def fail(_):
        raise ValueError("bad")

    assert run_grid([cell], path, fail, progress=False, on_error="record", revision="r") == []
    assert read_records(path)[0]["status"] == "error" and "bad" in read_records(path)[0]["error"]
    assert done_keys(path) == set()
    out = run_grid([cell], path, lambda c: {"metric": 0.5}, progress=False, revision="r")
    assert out[0]["result"]["metric"] == 0.5


def test_a_cut_last_line_is_dropped_before_appending(tmp_path):
    path = tmp_path / "grid.jsonl"
    append_record(path, {"key": "a", "status": "ok", "cell": {}, "result": {}})
    with open(path, "a") as fh:
        fh.write('{"key": "b", "sta')  # a kill during the write
    assert [r["key"] for r in read_records(path)] == ["a"]
    append_record(path, {"key": "c", "status": "ok"})
    assert [r["key"] for r in read_records(path)] == ["a", "c"]
    assert all(json.loads(line) for line in path.read_text().splitlines())


def test_a_corrupt_middle_line_names_the_file_and_line(tmp_path):
    path = tmp_path / "grid.jsonl"
    path.write_text('{"key": "a"}\nnot json\n{"key": "b"}\n')
    with pytest.raises(ConfigError, match=r"grid.jsonl:2"):
        read_records(path)


def _rec(method, eps, seed, value, stage="final", lr=1e-3, sel=None):
    cell = Cell("m", "sst2", method, eps, seed, stage=stage, hparams={"lr": lr})
    result = {"metric": value, "metric_name": "accuracy", "epsilon": eps, "delta": 1e-5}
    if sel is not None:
        result["selection_metric"] = sel
    return {"key": cell.key, "cell": cell.to_dict(), "result": result, "status": "ok"}


def test_select_best_uses_the_selection_metric_mean_over_seeds():
    recs = [_rec("raptor", 1.0, 0, 0.0, "tune", lr=1e-3, sel=0.60), _rec("raptor", 1.0, 1, 0.0, "tune", lr=1e-3, sel=0.70),
            _rec("raptor", 1.0, 0, 0.0, "tune", lr=3e-3, sel=0.64), _rec("raptor", 1.0, 1, 0.0, "tune", lr=3e-3, sel=0.64),
            _rec("raptor", 1.0, 0, 0.0, "tune", lr=1e-2, sel=math.nan),
            _rec("raptor", 1.0, 0, 0.99, "final", lr=1e-1)]  # a final cell never takes part in selection
    assert select_best(recs) == {("m", "sst2", "raptor", 1.0): {"lr": 1e-3}}


def test_summary_margins_and_table():
    recs = [_rec("raptor", 1.0, s, v) for s, v in enumerate((0.70, 0.72, 0.74))]
    recs += [_rec("dpsgd", 1.0, s, v) for s, v in enumerate((0.60, 0.61, 0.62))]
    recs += [_rec("nonprivate", None, s, v) for s, v in enumerate((0.90, 0.90, 0.90))]
    recs += [_rec("raptor", 8.0, s, v) for s, v in enumerate((0.70, 0.80, 0.75))]
    recs += [_rec("dpsgd", 8.0, s, v) for s, v in enumerate((0.76, 0.74, 0.75))]
    summary = summarize(recs)
    row = summary[("m", "sst2", "raptor", 1.0)]
    assert row["mean"] == pytest.approx(0.72) and row["std"] == pytest.approx(0.02) and row["values"] == [0.70, 0.72, 0.74]
    found = {m["epsilon"]: m for m in margins(summary)}
    assert found[1.0]["verdict"] == "win" and found[1.0]["best_baseline"] == "dpsgd"
    assert found[1.0]["margin"] == pytest.approx(0.11)
    assert found[8.0]["verdict"] == "tie"  # 0.75 vs 0.75 with spread
    table = markdown_table(summary, model="m", task="sst2")
    assert "| raptor | 0.720 ± 0.020 (3) |" in table and "non-private" in table


def test_a_single_seed_cell_shows_no_spread():
    summary = summarize([_rec("raptor", 1.0, 0, 0.7), _rec("dpsgd", 1.0, 0, 0.6), _rec("dpsgd", 1.0, 1, 0.62)])
    table = markdown_table(summary, model="m", task="sst2")
    assert "| raptor | 0.700 (1) |" in table and "| dpsgd | 0.610 ± 0.014 (2) |" in table


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    from raptor.analysis.paper_table import plot_metric_vs_epsilon

    recs = [_rec(m, e, s, 0.5 + 0.01 * s) for m in ("raptor", "dpsgd") for e in (1.0, 8.0) for s in range(2)]
    recs += [_rec("nonprivate", None, 0, 0.9)]
    out = plot_metric_vs_epsilon(summarize(recs), tmp_path / "p.png", model="m", task="sst2")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_method_has_its_own_fixed_colour():
    from raptor.analysis.paper_table import METHOD_COLOURS
    from raptor.training.config import METHODS

    assert set(METHODS) <= set(METHOD_COLOURS), f"no colour for {sorted(set(METHODS) - set(METHOD_COLOURS))}"
    colours = [METHOD_COLOURS[m] for m in METHODS]
    mpl = pytest.importorskip("matplotlib.colors")
    rgba = [mpl.to_rgba(c) for c in colours]  # distinct as drawn, not only as names
    assert len(set(rgba)) == len(METHODS), dict(zip(METHODS, colours))


def test_the_plot_draws_each_method_in_its_colour():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    from raptor.analysis.paper_table import METHOD_COLOURS, draw_metric_vs_epsilon
    from raptor.training.config import METHODS

    dp = [m for m in METHODS if m != "nonprivate"]
    recs = [_rec(m, e, s, 0.5 + 0.01 * s) for m in dp for e in (1.0, 8.0) for s in range(2)]
    recs += [_rec("nonprivate", None, 0, 0.9)]
    fig, ax = plt.subplots()
    try:
        draw_metric_vs_epsilon(ax, summarize(recs), model="m", task="sst2")
        drawn = {c.get_label(): to_rgba(c.lines[0].get_color()) for c in ax.containers}  # errorbars
        drawn.update({line.get_label(): to_rgba(line.get_color()) for line in ax.get_lines()
                      if line.get_label().startswith("nonprivate")})
    finally:
        plt.close(fig)
    want = {m: to_rgba(METHOD_COLOURS[m]) for m in dp}
    assert {m: drawn[m] for m in dp} == want
    assert to_rgba(METHOD_COLOURS["nonprivate"]) in drawn.values()
    assert len(set(drawn.values())) == len(METHODS)
