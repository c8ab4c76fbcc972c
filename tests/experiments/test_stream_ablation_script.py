"""experiments/stream_ablation.py: resumable, and a cell another process runs is skipped
(training replaced by a fake)."""

from __future__ import annotations

import contextlib
import dataclasses
import sys

import pytest


@pytest.fixture()
def sa(experiment_script, monkeypatch):
    monkeypatch.delitem(sys.modules, "run_grid_for_streams", raising=False)  # the module it loads, removed after
    return experiment_script("stream_ablation")


def test_a_claimed_cell_is_skipped_and_a_rerun_takes_up_only_what_is_left(sa, tmp_path, monkeypatch, capsys):
    from raptor.analysis.claims import claimed

    rg = sa._run_grid_module()
    monkeypatch.setattr(sa, "_run_grid_module", lambda: rg)
    results = tmp_path / "streams.jsonl"
    claims = tmp_path / ".claims" / "streams"
    argv = ["--methods", "shared-only", "--seeds", "0", "1", "2", "--model-dir", str(tmp_path / "no-model"),
            "--results", str(results)]
    calls = []
    held, taken = contextlib.ExitStack(), []

    def train_cell(cell, fx, *, eval_split=None):
        calls.append(cell)
        if cell.seed == 0 and not taken:  # "another process" takes seed 1 meanwhile
            taken.append(1)
            assert held.enter_context(claimed(claims, dataclasses.replace(cell, seed=1).key))
        return {"metric": 0.5 + 0.01 * cell.seed, "sigma": 1.0, "calibrated_clips": {}}, None

    monkeypatch.setattr(rg, "train_cell", train_cell)
    with held:
        assert sa.main(argv) == 0
    assert [c.seed for c in calls] == [0, 2]
    assert "skipped" in capsys.readouterr().out
    calls.clear()
    assert sa.main(argv) == 0  # the rerun: seeds 0 and 2 are done, seed 1 is no longer held
    assert [c.seed for c in calls] == [1]
    assert not list(claims.iterdir())  # every claim was released
