"""The one-run audit with power (issue 24, item 6): white-box Dirac canaries through the real
release path (Trainer.step -> Poisson sampling -> clipping -> release_gradients noise from the run's
generator -> ledger), scored per Steinke, Nasr & Jagielski (2023, section 6)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math

import numpy as np
import pytest
import scipy.special
import scipy.stats

import raptor.training.step.release as release_module
from raptor.audit.bounds import one_run_epsilon_for_guesses, one_run_epsilon_two_sided, one_run_p_value
from raptor.audit.one_run import OneRunConfig, run_one_run_audit
from raptor.cli.audit import load_run_inputs
from raptor.cli.main import main
from raptor.errors import ConfigError

#: a seeded tiny run: few real records (the canaries cost no model compute), 10 updates, no mid-run eval
DIRAC_RUN = ("--set", "data.max_train_samples=20", "--set", "data.max_eval_samples=20", "--steps", "10", "--max-length", "16",
             "--seed", "1", "--set", "eval_every=0", "--set", "performance.micro_batch_size=4096")


# --------------------------------------------------------------------------- the bound
def test_all_guesses_right_matches_the_closed_form():
    # delta = 0, r guesses all right: the p-value is q^r, so the bound is logit(significance^(1/r))
    for r, sig in [(10, 0.05), (200, 0.05), (5000, 0.01)]:
        expected = scipy.special.logit(sig ** (1.0 / r))
        assert one_run_epsilon_for_guesses(10_000, r, r, significance=sig, delta=0.0) == pytest.approx(expected,
                                                                                                       rel=1e-6)
    # the two-sided scorer on perfectly separated scores: 3 (k+, k-) pairs, the best is k+ = k- = 100
    included = np.arange(1000) % 2 == 0
    scores = np.where(included, 1.0, -1.0) + np.linspace(0, 1e-3, 1000)
    b = one_run_epsilon_two_sided(scores, included, significance=0.05, delta=0.0, fractions=(0.0, 0.1))
    assert (b.k_plus, b.k_minus, b.n_correct, b.pairs_tried) == (100, 100, 200, 3)
    assert b.epsilon == pytest.approx(scipy.special.logit((0.05 / 3) ** (1 / 200)), rel=1e-6)


def test_bound_with_delta_solves_the_naive_p_value():
    m, r, v, sig, delta = 2000, 300, 270, 0.05, 1e-5
    eps = one_run_epsilon_for_guesses(m, r, v, significance=sig, delta=delta)
    assert 0 < eps < one_run_epsilon_for_guesses(m, r, v, significance=sig, delta=0.0)
    q = scipy.special.expit(eps)  # the naive sum of the theorem's p-value at the bound equals the significance
    alpha, acc = 0.0, 0.0
    for i in range(1, v + 1):
        acc += scipy.stats.binom.pmf(v - i, r, q)
        alpha = max(alpha, acc / i)
    naive = scipy.stats.binom.sf(v - 1, r, q) + alpha * delta * 2 * m
    assert naive == pytest.approx(sig, rel=1e-4) and one_run_p_value(m, r, v, eps, delta) == pytest.approx(sig, rel=1e-4)
    assert one_run_epsilon_two_sided(np.zeros(10), np.ones(10, bool), delta=1e-5).epsilon == 0.0  # ties: no signal
    with pytest.raises(ConfigError, match="included"):
        one_run_epsilon_two_sided(np.zeros(10), np.ones(9, bool), delta=1e-5)


# --------------------------------------------------------------------------- the hook
def test_hook_passes_real_records_to_the_engine_and_clips_each_canary():
    import torch

    from raptor.audit.dirac import CANARY_COLUMN, DIRAC_PARAM, DiracCanaryEngine, records_with_canaries
    from raptor.roles.groups import GroupKey, GroupMap, ParamSlice

    w = torch.nn.Parameter(torch.zeros(3))
    calls = []

    class Engine:
        group_map = GroupMap(groups={GroupKey.dense(): (ParamSlice("w"),)}, params={"w": w})

        def compute(self, batch, clip_norms):
            calls.append(batch)
            return dataclasses.make_dataclass("R", ["clipped_sums", "num_nonfinite"])(
                {"w": batch["labels"].float().sum() * torch.ones(3)}, 0)

    hook = DiracCanaryEngine(Engine(), GroupKey.dense(), canaries=5, device="cpu")
    assert set(hook.group_map.params) == {"w", DIRAC_PARAM}
    assert hook.group_map.groups[GroupKey.dense()][-1] == ParamSlice(DIRAC_PARAM)
    train = {"input_ids": torch.ones(2, 4, dtype=torch.long), "attention_mask": torch.ones(2, 4, dtype=torch.long),
             "labels": torch.tensor([1, 2])}
    records = records_with_canaries(train, torch.tensor([False, True, False, True, True]))
    assert records[CANARY_COLUMN].tolist() == [-1, -1, 1, 3, 4] and records["labels"].shape == (5,)
    out = hook.compute({k: v[[0, 2, 4]] for k, v in records.items()}, {GroupKey.dense(): 0.5})
    assert len(calls) == 1 and CANARY_COLUMN not in calls[0] and calls[0]["labels"].tolist() == [1]
    assert out.clipped_sums["w"].tolist() == [1.0, 1.0, 1.0]                     # the real record, untouched
    assert out.clipped_sums[DIRAC_PARAM].tolist() == [0.0, 0.5, 0.0, 0.0, 0.5]   # norm 2C clipped to C = 0.5
    hook.compute({k: v[[2]] for k, v in records.items()}, {GroupKey.dense(): 0.5})
    assert len(calls) == 1  # a batch of canaries only never reaches the engine


# --------------------------------------------------------------------------- the audit
@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    cfg = OneRunConfig(canaries=10, canary_kind="dirac", train_args=DIRAC_RUN,
                       output_dir=str(tmp_path_factory.mktemp("dirac")))
    loaded = load_run_inputs(cfg)
    return dataclasses.replace(loaded, public={k: v[:120] for k, v in loaded.public.items()})


def _audit(inputs, tmp_path, *, epsilon: float, **kw):
    cfg = OneRunConfig(canary_kind="dirac", epsilon=epsilon, train_args=DIRAC_RUN, output_dir=str(tmp_path / "run"),
                       **kw)
    config = inputs.config  # what load_run_inputs makes of --epsilon
    config = dataclasses.replace(config, privacy=dataclasses.replace(config.privacy, epsilon=epsilon))
    return run_one_run_audit(cfg, dataclasses.replace(inputs, config=config, model=copy.deepcopy(inputs.model)))


def test_dirac_canaries_bound_at_claimed_epsilon_8(inputs, tmp_path):
    res = _audit(inputs, tmp_path, canaries=20_000, epsilon=8.0, sample_rate=0.5)
    bound = res.bounds["dirac"]
    assert res.claimed_epsilon == pytest.approx(8.0, rel=0.01)
    assert 1.0 <= bound.epsilon < res.claimed_epsilon  # the target of issue 24, and a correct run passes
    assert res.train_records == 20 + res.included and res.extra["released_steps"] == 10
    # the scores are the real release: out-canaries are pure noise with the plan's std (sigma_g sqrt(T) in
    # clip units), in-canaries add about q T clipped unit gradients
    ins, outs = res.scores["dirac"]
    sd = res.extra["sigma_canary_group"] * math.sqrt(10)
    assert abs(outs.mean()) < 5 * sd / math.sqrt(outs.size) and outs.std() == pytest.approx(sd, rel=0.05)
    assert ins.mean() - outs.mean() == pytest.approx(0.5 * 10, rel=0.05)
    assert json.dumps(res.to_dict())  # serialisable, with the canaries' group and the plan


def test_dirac_canaries_catch_noise_4x_too_small(inputs, tmp_path, monkeypatch):
    add_noise = release_module.add_gaussian_noise_

    def quarter(view, sigma, clip_norm, generator):  # the planted bug: the ledger keeps sigma
        return add_noise(view, sigma / 4.0, clip_norm, generator)

    monkeypatch.setattr(release_module, "add_gaussian_noise_", quarter)
    res = _audit(inputs, tmp_path, canaries=50_000, epsilon=2.0, sample_rate=0.9)
    assert res.claimed_epsilon == pytest.approx(2.0, rel=0.01)
    assert res.bounds["dirac"].epsilon > res.claimed_epsilon


def test_dirac_config_errors():
    with pytest.raises(ConfigError, match="--canary-kind"):
        OneRunConfig(canary_kind="gradient")
    with pytest.raises(ConfigError, match="--sample-rate"):
        OneRunConfig(sample_rate=0.5)
    with pytest.raises(ConfigError, match="--sample-rate"):
        OneRunConfig(canary_kind="dirac", sample_rate=1.0)


def test_cli_canary_kind_dirac(inputs, tmp_path, monkeypatch, capsys):
    import raptor.cli.audit as cli_audit

    seen = []

    def loaded(cfg):  # the fixture's run (same flags), not a second load; 3 updates are enough here
        seen.append(cfg)
        return dataclasses.replace(inputs, config=dataclasses.replace(inputs.config, steps=3),
                                   model=copy.deepcopy(inputs.model))

    monkeypatch.setattr(cli_audit, "load_run_inputs", loaded)
    rc = main(["audit", "one-run", "--canary-kind", "dirac", "--canaries", "2000", "--sample-rate", "0.5",
               "--no-progress", "--output-dir", str(tmp_path), "--", *DIRAC_RUN])
    out = capsys.readouterr().out
    assert rc == 0 and seen[0].canary_kind == "dirac" and seen[0].sample_rate == 0.5 and seen[0].canaries == 2000
    assert "one-run audit (raptor, dirac score, m=2000): epsilon lower bound" in out and "below the claim" in out
    data = json.loads((tmp_path / "audit.json").read_text())
    assert data["canary_kind"] == "dirac" and data["canary_group"] == "shared"
    assert data["bounds"]["dirac"]["pairs_tried"] > 1 and (tmp_path / "scores.png").exists()
    rc = main(["audit", "one-run", "--canary-kind", "dirac", "--output-dir", str(tmp_path), "--", "--batch-size", "8"])
    captured = capsys.readouterr()
    assert rc != 0 and "drop --batch-size" in captured.out + captured.err and len(seen) == 1
