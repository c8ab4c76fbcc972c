"""experiments/run_grid.py: matched budget, tune -> final on fresh seeds, resume, plan and summaries
(training replaced by a fake: the library parts are tested in test_grid.py)."""

from __future__ import annotations

import json

import pytest


@pytest.fixture()
def rg(experiment_script):
    return experiment_script("run_grid")


def _fake(calls):
    def train_cell(cell, fx, *, eval_split=None):
        calls.append(cell)
        lr = cell.params["lr"]
        score = 0.6 + (0.1 if lr == 2e-3 else 0.0) + 0.01 * cell.seed
        split = "selection" if cell.stage == "tune" else "dev"
        out = {"metric_name": "accuracy", "epsilon": cell.epsilon or "inf", "delta": fx.delta, "eval_split": split,
               "calibrated_clips": {}}
        out["selection_metric" if split == "selection" else "metric"] = score
        return out, None
    return train_cell


def _args(rg, tmp_path, *extra):
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "model.safetensors").write_bytes(b"weights")
    argv = ["--grid", "t", "--results-dir", str(tmp_path / "res"), "--model-dir", str(model), "--models", "warm",
            "random", "--methods", "nonprivate", "dpsgd", "raptor", "--epsilons", "1", "8", "--seeds", "0", "1", "2",
            *extra]
    return argv


def test_matched_budget_and_search_space(rg, monkeypatch):
    k = rg.check_matched_budget(rg.METHODS)
    assert k >= 2 and all(len(rg.search_space(m)) == k for m in rg.DP_METHODS)
    assert all("lr" in h for m in rg.METHODS for h in rg.search_space(m))
    default = rg.search_space("raptor")
    for space, knob, value in (("expert-lr", "lr_expert", None), ("shared-ratio-0.9", "shared_ratio", 0.9),
                               ("first-layer", "layers", "0")):
        monkeypatch.setattr(rg, "SPACE", space)
        assert rg.check_matched_budget(rg.METHODS) == k  # RAPTOR's knob inside the same budget
        raptor = rg.search_space("raptor")
        assert [h["lr"] for h in raptor] == [h["lr"] for h in default]  # only the one knob differs
        assert all(h[knob] == (value if value is not None else h["lr"] / 8) for h in raptor)
    assert rg._layers("auto") == "auto" and rg._layers("0") == (0,) and rg._layers("0,2") == (0, 2)


def test_tune_then_final_on_fresh_seeds_then_resume(rg, tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(rg, "train_cell", _fake(calls))
    argv = _args(rg, tmp_path)
    assert rg.main(argv) == 0
    k = rg.check_matched_budget(rg.METHODS)
    groups = 2 * (1 + 2 * 2)  # models x (nonprivate + methods x epsilons)
    assert len(calls) == groups * (k + 3)
    tunes = [c for c in calls if c.stage == "tune"]
    finals = [c for c in calls if c.stage == "final"]
    assert {c.seed for c in tunes} == {100} and {c.seed for c in finals} == {0, 1, 2}
    # the best on the selection split; ties (nonprivate here) go to the configuration listed first
    assert all(c.params["lr"] == (2e-3 if c.method != "nonprivate" else 1e-3) for c in finals)
    lines = (tmp_path / "res" / "t.jsonl").read_text().splitlines()
    assert len(lines) == len(calls)
    calls.clear()
    assert rg.main(argv) == 0  # a rerun skips every finished cell
    assert calls == []
    capsys.readouterr()
    assert rg.main([*argv, "--plan"]) == 0
    assert "done, 0 to run" in capsys.readouterr().out
    assert rg.main([*argv, "--summarize"]) == 0
    out = json.loads((tmp_path / "res" / "t.json").read_text())
    assert out["delta"] == 1e-5 and out["search_space"]["raptor"] and out["selected"]
    rows = {(r["model"], r["method"], r["target_epsilon"]): r for r in out["summary"]}
    assert all(r["n"] == 3 and len(r["values"]) == 3 for r in rows.values())
    assert len(list((tmp_path / "res").glob("t_sst2_*.png"))) == 2
    assert "never on the dev split" in out["selection"]


def test_shards_split_the_groups(rg, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(rg, "train_cell", _fake(calls))
    for shard in ("0/2", "1/2"):
        assert rg.main([*_args(rg, tmp_path), "--shard", shard]) == 0
    keys = [c.key for c in calls]
    assert len(keys) == len(set(keys))
    assert (tmp_path / "res" / "t.shard0of2.jsonl").exists() and (tmp_path / "res" / "t.shard1of2.jsonl").exists()
    calls.clear()
    assert rg.main(_args(rg, tmp_path)) == 0  # the unsharded rerun sees every shard's cells
    assert calls == []


def test_a_cell_in_two_files_counts_once(rg, tmp_path, monkeypatch):
    """A GPU lease's shard file may repeat a cell that also ran here: the summary counts it once."""
    calls = []
    monkeypatch.setattr(rg, "train_cell", _fake(calls))
    assert rg.main(_args(rg, tmp_path)) == 0
    res = tmp_path / "res"
    n = len(rg.all_records("t"))
    (res / "t.shard0of13.jsonl").write_text((res / "t.jsonl").read_text())  # every cell again
    assert len(rg.all_records("t")) == n
    assert len({r["key"] for r in rg.all_records("t")}) == n
    out = rg.main([*_args(rg, tmp_path), "--summarize"])
    assert out == 0
    summary = json.loads((res / "t.json").read_text())
    assert {row["n"] for row in summary["summary"]} == {3}  # three final seeds, not six


def test_demo_space_runs_one_fixed_configuration_without_tuning(rg, tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(rg, "train_cell", _fake(calls))
    argv = [*_args(rg, tmp_path), "--space", "demo"]
    assert rg.main(argv) == 0
    assert calls and all(c.stage == "final" for c in calls)  # one configuration: nothing to select
    assert len(calls) == 2 * (1 + 2 * 2) * 3  # groups x final seeds
    by_method = {c.method: c.params for c in calls}
    assert by_method["raptor"]["opt"] == "sgd" and by_method["raptor"]["shared_ratio"] == 0.9
    assert by_method["dpsgd"]["lr"] == 2.0 and by_method["nonprivate"]["epochs"] == 3.0
    assert by_method["dpsgd"]["B"] == 128  # the grid's fixed settings stay under the configuration
    calls.clear()
    assert rg.main(argv) == 0 and calls == []  # resumable like the tuned grid
    capsys.readouterr()
    assert rg.main([*argv, "--plan"]) == 0
    assert "done, 0 to run" in capsys.readouterr().out
    assert rg.main([*argv, "--summarize"]) == 0
    out = json.loads((tmp_path / "res" / "t.json").read_text())
    assert out["space"] == "demo" and "no tuning" in out["selection"]
    assert all(r["n"] == 3 for r in out["summary"]) and len(out["summary"]) == 10
    assert rg.main([*argv, "--summarize", "--summary-name", "t.other"]) == 0  # a second summary beside the first
    assert (tmp_path / "res" / "t.other.json").exists() and (tmp_path / "res" / "t.json").exists()
    assert len(list((tmp_path / "res").glob("t.other_sst2_*.png"))) == 2


def test_expert_lr_space_shares_baseline_cells_and_selects_within_its_own_budget(rg, tmp_path, monkeypatch, capsys):
    calls = []
    fake = _fake(calls)

    def train_cell(cell, fx, *, eval_split=None):  # the default space's raptor configs score higher
        out, t = fake(cell, fx, eval_split=eval_split)
        if "lr_expert" not in cell.params:
            out["selection_metric" if cell.stage == "tune" else "metric"] += 0.2
        return out, t

    monkeypatch.setattr(rg, "train_cell", train_cell)
    argv = _args(rg, tmp_path)
    assert rg.main(argv) == 0
    calls.clear()
    assert rg.main([*argv, "--space", "expert-lr"]) == 0
    assert calls and {c.method for c in calls} == {"raptor"}  # the baselines' cells are reused
    assert all(c.params["lr_expert"] == pytest.approx(c.params["lr"] / 8) for c in calls)
    tunes = [c for c in calls if c.stage == "tune"]
    assert len(tunes) == 2 * 2 * rg.CONFIGS  # models x epsilons x its (matched) budget
    assert rg.main([*argv, "--space", "expert-lr", "--summarize", "--summary-name", "t.xlr"]) == 0
    xlr = json.loads((tmp_path / "res" / "t.xlr.json").read_text())
    raptor = {g: h for g, h in xlr["selected"].items() if "/ raptor /" in g}
    assert raptor and all("lr_expert" in h for h in raptor.values())  # never the other space's better cells
    raptor_tuning = {g: rows for g, rows in xlr["tuning_runs"].items() if "/ raptor /" in g}
    assert raptor_tuning and all(len(rows) == rg.CONFIGS for rows in raptor_tuning.values())
    assert rg.main([*argv, "--summarize"]) == 0
    default = json.loads((tmp_path / "res" / "t.json").read_text())
    assert all("lr_expert" not in h for g, h in default["selected"].items() if "/ raptor /" in g)
    capsys.readouterr()


def test_help_exits_zero_and_describes_the_whole_first_sentence(rg, capsys):
    """--help formats every help string (a bare % once made argparse crash) and the description is the
    docstring's whole first paragraph, not its first line cut mid-sentence."""
    with pytest.raises(SystemExit) as stop:
        rg.parse_args(["--help"])
    assert stop.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "from a warm start or random init, with a matched tuning budget; resumable" in out
    assert "index % N == K" in out


def test_plan_names_the_tuning_stage_only_where_one_runs(rg, tmp_path, capsys):
    argv = _args(rg, tmp_path)
    assert rg.main([*argv, "--space", "demo", "--plan"]) == 0
    out = capsys.readouterr().out
    assert "no tuning stage" in out and "tune seed" not in out and "configurations per DP method" not in out
    assert "30 cells (one fixed configuration per method, no tuning stage; 3 final seed(s) per group)" in out
    assert rg.main([*argv, "--plan"]) == 0
    out = capsys.readouterr().out
    k = rg.check_matched_budget(rg.METHODS)
    assert f"{k} configurations per DP method x 1 tune seed(s) in 10 tuned group(s), + 3 final seed(s)" in out
    assert "no tuning stage" not in out


def test_stop_at_means_the_next_occurrence_or_the_given_date(rg):
    import datetime as dt

    utc = dt.timezone.utc
    now = dt.datetime(2026, 12, 4, 22, 40, tzinfo=utc)
    at = lambda text: dt.datetime.fromtimestamp(rg._deadline(text, now), utc)  # noqa: E731
    assert at("23:00") == dt.datetime(2026, 12, 4, 23, 0, tzinfo=utc)
    # past midnight: tomorrow, not a deadline already gone (which stopped a grid before its first cell)
    assert at("00:50") == dt.datetime(2026, 12, 5, 0, 50, tzinfo=utc)
    assert at("22:40") == dt.datetime(2026, 12, 5, 22, 40, tzinfo=utc)
    # a full date is taken as given, even when past (chained runs stop at one fixed time)
    assert at("2026-12-04T20:00") == dt.datetime(2026, 12, 4, 20, 0, tzinfo=utc)
    with pytest.raises(SystemExit, match="--stop-at"):
        rg._deadline("half past", now)



def test_a_cell_another_process_runs_is_skipped_and_its_group_waits_for_a_rerun(rg, tmp_path, monkeypatch, capsys):
    """Two processes on one grid never run one cell twice; a group whose tuning is incomplete
    selects nothing (a selection must see the whole search space) until a rerun."""
    from raptor.analysis.claims import claimed

    calls = []
    monkeypatch.setattr(rg, "train_cell", _fake(calls))
    argv = [*_args(rg, tmp_path), "--models", "warm", "--methods", "nonprivate", "dpsgd", "--epsilons", "8"]
    assert rg.main([*argv, "--results-dir", str(tmp_path / "first")]) == 0  # the grid's cells, in order
    every = list(calls)
    held_tune = next(c for c in every if c.method == "dpsgd" and c.stage == "tune")
    held_final = next(c for c in every if c.method == "nonprivate" and c.stage == "final")
    calls.clear()
    claims = tmp_path / "res" / ".claims" / "t"
    with claimed(claims, held_tune.key) as a, claimed(claims, held_final.key) as b:
        assert a and b  # held here as if by another process (its own open file description)
        assert rg.main(argv) == 0
    out = capsys.readouterr()
    ran = {c.key for c in calls}
    assert len(ran) == len(calls)  # nothing twice
    dpsgd_finals = {c.key for c in every if c.method == "dpsgd" and c.stage == "final"}
    assert held_tune.key not in ran and held_final.key not in ran and not ran & dpsgd_finals
    assert ran == {c.key for c in every} - {held_tune.key, held_final.key} - dpsgd_finals
    assert out.err.count("skipped ") + out.out.count("skipped ") == 2
    assert "not every tuning cell has finished" in out.err + out.out
    calls.clear()
    assert rg.main(argv) == 0  # the rerun takes up exactly what was left
    assert {c.key for c in calls} == {held_tune.key, held_final.key} | dpsgd_finals
    assert not list(claims.iterdir())  # every claim was released


def test_a_widened_search_space_selects_nothing_until_every_configuration_has_run(rg, tmp_path, monkeypatch, capsys):
    """--configs 3 on a grid tuned with 2: a group's best of 2 would be a smaller budget than the
    others' best of 3, so the summary leaves the group out, and says so, until its third runs."""
    calls = []
    monkeypatch.setattr(rg, "train_cell", _fake(calls))
    argv = [*_args(rg, tmp_path), "--models", "warm", "--methods", "nonprivate", "dpsgd", "raptor", "--epsilons", "8"]
    assert rg.main([*argv, "--configs", "2"]) == 0
    assert rg.main([*argv, "--configs", "2", "--summarize"]) == 0
    two = json.loads((tmp_path / "res" / "t.json").read_text())
    assert {r["method"] for r in two["summary"]} == {"nonprivate", "dpsgd", "raptor"} and not two["tuning_incomplete"]
    capsys.readouterr()
    assert rg.main([*argv, "--configs", "3", "--summarize"]) == 0
    md = capsys.readouterr().out
    three = json.loads((tmp_path / "res" / "t.json").read_text())
    assert three["summary"] == [] and three["margins"] == []  # every group misses its third configuration
    assert len(three["tuning_incomplete"]) == 3 and "select nothing yet" in md
    calls.clear()
    assert rg.main([*argv, "--configs", "3"]) == 0  # the third configurations (and any new finals) run
    assert {c.stage for c in calls} >= {"tune"}
    assert rg.main([*argv, "--configs", "3", "--summarize"]) == 0
    done = json.loads((tmp_path / "res" / "t.json").read_text())
    assert {r["method"] for r in done["summary"]} == {"nonprivate", "dpsgd", "raptor"} and not done["tuning_incomplete"]


def test_the_regenerate_command_leaves_out_how_one_machine_ran_its_share(rg):
    argv = ["--grid", "g", "--threads", "1", "--shard=1/2", "--stop-at", "2026-12-05T14:25", "--configs", "3",
            "--summarize"]
    assert rg.regenerating_argv(argv) == ["--grid", "g", "--configs", "3", "--summarize"]
