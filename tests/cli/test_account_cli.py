"""`raptor account` and `raptor plan`: outputs, --json, and exit status 2 with a message on bad input."""

from __future__ import annotations

import json

import pytest

from raptor.accounting import epsilon_of, joint_noise_multiplier
from raptor.cli.main import main

ACCOUNT = ["account", "--sample-rate", "0.01", "--noise-multiplier", "0.7428", "--steps", "1000", "--delta", "1e-5"]


def test_account_prints_epsilon(capsys):
    assert main(ACCOUNT) == 0
    out = capsys.readouterr().out
    assert out.startswith("epsilon = 3.875") and "delta = 1e-05" in out


def test_account_json_matches_the_library(capsys):
    assert main(ACCOUNT + ["--json", "--accountant", "rdp", "--adjacency", "replace-one"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["epsilon"] == epsilon_of((((0.01, 0.7428), 1000),), 1e-5, accountant="rdp", adjacency="replace-one")
    assert (d["steps"], d["accountant"], d["adjacency"]) == (1000, "rdp", "replace-one")


def test_account_issue_example_joint_sigma(capsys):
    sigma = joint_noise_multiplier(0.8, 2.0, 1)
    assert main(["account", "--sample-rate", "0.01", "--noise-multiplier", repr(sigma), "--steps", "1000",
                 "--delta", "1e-5", "--json"]) == 0
    assert round(json.loads(capsys.readouterr().out)["epsilon"], 2) == 3.88


@pytest.mark.parametrize("flag,value,match", [
    ("--sample-rate", "1.5", "sample_rate=1.5 is outside (0, 1]"),
    ("--sample-rate", "0", "sample_rate=0.0"),
    ("--noise-multiplier", "0", "noise_multiplier=0.0"),
    ("--steps", "0", "count=0"),
    ("--delta", "1", "delta=1.0 is outside (0, 1)"),
])
def test_account_bad_values_exit_2_with_message(capsys, flag, value, match):
    argv = list(ACCOUNT)
    argv[argv.index(flag) + 1] = value
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("raptor account: error:") and match in err


@pytest.mark.parametrize("argv", [
    ["account", "--sample-rate", "0.01"],  # missing required flags
    ACCOUNT + ["--accountant", "prv"],
    ACCOUNT[:2] + ["abc"] + ACCOUNT[3:],
    ["plan", "--dataset-size", "1000", "--batch-size", "100", "--epochs", "1", "--epsilon", "2", "--alternate", "2"],
    ["plan", "--dataset-size", "1000", "--batch-size", "100", "--epochs", "1", "--epsilon", "2", "--alternate", "0:1"],
])
def test_argparse_errors_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "error:" in capsys.readouterr().err


PLAN = ["plan", "--dataset-size", "67349", "--batch-size", "1024", "--epochs", "3", "--epsilon", "8"]


def test_plan_prints_every_quantity(capsys):
    assert main(PLAN + ["--layers", "2", "--shared-ratio", "0.3"]) == 0
    out = capsys.readouterr().out
    for key in ("sigma_s", "sigma_e", "sigma_eff", "q ", "T ", "epsilon", "delta"):
        assert key in out
    assert "T         = 198" in out and "delta     = 1e-06 (default" in out


def test_plan_json_alternate(capsys):
    assert main(PLAN + ["--alternate", "1:1", "--json", "--delta", "1e-6"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["alternate"] == [1, 1] and d["epsilon"] <= d["target_epsilon"] == 8.0
    assert d["delta"] == 1e-6 and d["delta_is_default"] is False
    assert {"sigma_shared", "sigma_expert", "sigma_eff", "sample_rate", "steps"} <= d.keys()


@pytest.mark.parametrize("extra,match", [
    (["--epsilon", "1e-4"], "out of reach"),
    (["--shared-ratio", "1"], "shared_ratio=1.0"),
    (["--delta", "0.5"], "not below 1/N"),
    (["--batch-size", "100000"], "exceeds dataset_size"),
])
def test_plan_bad_values_exit_2(capsys, extra, match):
    assert main(PLAN + extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("raptor plan: error:") and match in err


def test_plan_text_alternate_shows_the_phase_sigmas(capsys):
    assert main(PLAN + ["--alternate", "1:1"]) == 0
    out = capsys.readouterr().out
    assert "alternate 1:1" in out and "shared-only steps sigma_s" in out and "sigma_e/sqrt(L)" in out


def test_plan_steps_instead_of_epochs(capsys):
    steps = ["plan", "--dataset-size", "67349", "--batch-size", "1024", "--steps", "198", "--epsilon", "8", "--json"]
    assert main(steps) == 0
    by_steps = json.loads(capsys.readouterr().out)
    assert main(PLAN + ["--json"]) == 0
    by_epochs = json.loads(capsys.readouterr().out)
    assert by_steps["steps"] == by_epochs["steps"] == 198 and by_steps["epochs"] is None
    assert by_steps["sigma_eff"] == pytest.approx(by_epochs["sigma_eff"], rel=1e-12)
    from raptor.training.config import PrivacyConfig

    assert by_steps["shared_ratio"] == PrivacyConfig().shared_ratio == 0.9  # the same default as raptor train
    with pytest.raises(SystemExit) as info:
        main(PLAN + ["--steps", "198"])
    assert info.value.code == 2


def test_plan_rdp_accountant_is_never_below_pld(capsys):
    assert main(PLAN + ["--json", "--accountant", "rdp"]) == 0
    rdp = json.loads(capsys.readouterr().out)
    assert main(PLAN + ["--json"]) == 0
    pld = json.loads(capsys.readouterr().out)
    assert rdp["accountant"] == "rdp" and rdp["epsilon"] <= 8.0
    # RDP's bound is looser, so hitting the same target needs at least as much noise.
    assert rdp["sigma_eff"] >= pld["sigma_eff"]

