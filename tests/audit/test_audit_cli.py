"""``raptor audit``: both audits print the bound next to the claim with the confidence, and write
JSON and a PNG; the one-run audit trains with the real trainer on a tiny run."""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest

from raptor.audit.one_run import OneRunConfig, run_one_run_audit
from raptor.cli.audit import load_run_inputs
from raptor.cli.main import main
from raptor.errors import ConfigError

TINY_RUN = ("--set", "data.max_train_samples=300", "--set", "data.max_eval_samples=50", "--batch-size", "64", "--epochs", "1",
            "--max-length", "16", "--seed", "1")


def test_mechanism_audit_cli_writes_json_and_png(tmp_path, capsys):
    rc = main(["audit", "mechanism", "--variant", "noise-4x-too-small", "--releases", "2000",
               "--output-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "epsilon lower bound" in out and "claimed epsilon" in out and "95% confidence" in out
    assert "ABOVE the claim" in out
    data = json.loads((tmp_path / "audit.json").read_text())
    assert data["variant"] == "noise-4x-too-small" and data["exceeds_claim"] is True
    assert (tmp_path / "scores.png").stat().st_size > 1000


@pytest.fixture(scope="module")
def tiny_inputs(tmp_path_factory):
    """The tiny run's inputs, loaded once through ``load_run_inputs`` (the CLI's path) for both tests;
    the public corpus cut to 120 records (its routing is redone by every run)."""
    loaded = load_run_inputs(OneRunConfig(canaries=40, train_args=TINY_RUN,
                                          output_dir=str(tmp_path_factory.mktemp("one-run"))))
    return dataclasses.replace(loaded, public={k: v[:120] for k, v in loaded.public.items()})


def _fresh(inputs, **config):
    return dataclasses.replace(inputs, model=copy.deepcopy(inputs.model),
                               config=dataclasses.replace(inputs.config, **config))


def test_one_run_cli_on_a_tiny_seeded_run(tmp_path, capsys, monkeypatch, tiny_inputs):
    import raptor.cli.audit as cli_audit

    seen = []
    monkeypatch.setattr(cli_audit, "load_run_inputs", lambda cfg: seen.append(cfg) or _fresh(tiny_inputs))
    rc = main(["audit", "one-run", "--canaries", "20", "--no-progress", "--output-dir", str(tmp_path), "--",
               *TINY_RUN])
    out = capsys.readouterr().out
    assert rc == 0 and "NOT secure" in out
    assert seen[0].train_args == TINY_RUN and seen[0].canaries == 20 and seen[0].canary_kind == "input"
    assert out.count("epsilon lower bound") == 2  # loss and gradient scores
    data = json.loads((tmp_path / "audit.json").read_text())
    assert data["audit"] == "one-run" and 0 < data["included"] < 20
    assert 0 <= data["epsilon_lower_bound"]["loss"] <= data["claimed_epsilon"]
    assert (tmp_path / "scores.png").exists()


def test_one_run_trains_on_the_included_canaries_only(tmp_path, tiny_inputs):
    cfg = OneRunConfig(method="dpsgd", canaries=20, train_args=TINY_RUN, output_dir=str(tmp_path / "run"))
    res = run_one_run_audit(cfg, _fresh(tiny_inputs, method="dpsgd", output_dir=str(tmp_path / "run")))
    ins, outs = res.scores["loss"]
    assert ins.size == res.included and ins.size + outs.size == 20
    assert res.train_records == 300 + res.included  # the trainer saw the private records plus the included canaries
    assert np.all(np.isfinite(ins)) and np.all(np.isfinite(outs))
    assert res.claimed_epsilon == pytest.approx(8.0, rel=0.01)
    with pytest.raises(ConfigError, match="--canaries"):
        OneRunConfig(canaries=3)
