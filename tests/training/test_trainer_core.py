"""Trainer logic on a toy model with a one-record-loop engine: release, denominators, empty
batches, schedule, budget, resume."""

from __future__ import annotations

import math

import pytest
import torch
from toy_engine import E, ListLedger, ToyEngine, ToyMoE, toy_records

from raptor.errors import BudgetExceededError
from raptor.mechanisms import seeded_generator
from raptor.recipes import tiny_recipe
from raptor.roles.public_stats import group_denominators
from raptor.training.config import PrivacyConfig, Schedule
from raptor.training.step.noise_plans import FixedPlan
from raptor.training.step.plan import build_step_plan
from raptor.training.step.release import release_gradients
from raptor.training.step.trainer import Trainer

SHARES = {0: [0.5, 0.3, 0.2]}


def _trainer(records, *, steps=4, q=0.25, sigmas=(1.0, 2.0), schedule=None, denominator="public", seed=0,
             ledger=None, optim=None, clip=1.0, secure=False):
    model = ToyMoE()
    engine = ToyEngine(model)
    n = int(records["labels"].shape[0])
    batch = max(1, round(q * n))
    groups = engine.group_map.groups
    noise = FixedPlan(batch / n, steps, {"shared": sigmas[0], "expert": sigmas[1]}, 1, schedule or Schedule())
    plan = build_step_plan(noise, groups, clip_norms={k: clip for k in groups}, trained_layers=(0,),
                           denominators=group_denominators(groups, batch_size=batch, shares=SHARES, kind=denominator),
                           grouping="roles")
    cfg = tiny_recipe("raptor", steps=steps, batch_size=batch, seed=None if secure else seed,
                      privacy=PrivacyConfig(epsilon=None, noise_multipliers=sigmas, secure_rng=secure,
                                            schedule=schedule or Schedule()))
    if optim is not None:
        from dataclasses import replace
        cfg = replace(cfg, optim=optim)
    return Trainer(model=model, engine=engine, train=records, validation=records, plan=plan,
                   ledger=ledger if ledger is not None else ListLedger(), config=cfg)


def test_setup_denominators_are_public_and_fixed():
    plan = _trainer(toy_records(40)).plan
    dens = {str(r.key): r.denominator for r in plan.groups}
    assert dens["shared"] == 10.0
    assert [dens[f"expert/0/{e}"] for e in range(E)] == pytest.approx([5.0, 3.0, 2.0])
    uni = _trainer(toy_records(40), denominator="uniform").plan
    assert all(r.denominator == pytest.approx(10 / 3) for r in uni.groups if r.key.is_expert)


def test_expert_release_does_not_depend_on_realized_owner_counts():
    # Two batches with very different owner counts: the same denominator and the same noise,
    # i.e. release(sums) - sums / n_hat is identical, draw for draw.
    trainer = _trainer(toy_records(40))
    engine, plan = trainer.engine, trainer.plan
    a = toy_records(8, seed=2, skew=1.0)   # every record owned by expert 0
    b = toy_records(3, seed=3)             # few records, mixed owners
    outs = []
    for batch in (a, b):
        sums = engine.compute(batch, plan.clip_norms).clipped_sums
        rel = release_gradients(sums, trainer.slices_of, trainer.params, plan.step(0).groups, seeded_generator(11))
        noise_part = {}
        for r in plan.groups:
            for sl in trainer.slices_of[r.key]:
                noise_part[sl.name] = rel[sl.name] - sums[sl.name] / r.denominator
        outs.append(noise_part)
    assert outs[0].keys() == outs[1].keys()
    for name in outs[0]:
        torch.testing.assert_close(outs[0][name], outs[1][name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("group", ["shared", "expert/0/2"])
def test_released_noise_has_the_planned_std_per_group(group):
    # Opacus-style check of the noise scale: with zero clipped sums the release is pure noise, and
    # every coordinate of group g must be N(0, (sigma_g C_g / n_hat_g)^2). sigma_s = 1, sigma_e = 2,
    # C = 0.7 and n_hat = 10 (shared) / B pi_2 = 2 (expert 2): std 0.07 and 0.7.
    trainer = _trainer(toy_records(40), sigmas=(1.0, 2.0), clip=0.7)
    step = trainer.plan.step(0)
    rel = next(r for r in step.groups if str(r.key) == group)
    expected = {"shared": 1.0 * 0.7 / 10, "expert/0/2": 2.0 * 0.7 / 2}[group]
    assert rel.noise_std == pytest.approx(expected)
    names = [sl.name for sl in trainer.slices_of[rel.key]]
    draws = []
    generator = seeded_generator(5)
    for _ in range(300):
        out = release_gradients({}, trainer.slices_of, trainer.params, step.groups, generator)
        draws.append(torch.cat([out[n].reshape(-1) for n in names]).double())
    x = torch.cat(draws)
    n = x.numel()
    # The sample std of n i.i.d. normals has relative standard error 1/sqrt(2(n-1)); the mean has
    # standard error std/sqrt(n). Allow 5 standard errors (false-alarm rate ~ 6e-7 each).
    tol = 5.0 / math.sqrt(2 * (n - 1))
    assert float(x.std()) == pytest.approx(expected, rel=tol)
    assert abs(float(x.mean())) < 5 * expected / math.sqrt(n)
    # And a wrong scale is rejected at this tolerance: the test can fail.
    assert abs(expected * 1.1 - float(x.std())) > tol * expected


def test_empty_sample_is_a_noise_only_step_for_every_group():
    trainer = _trainer(toy_records(40), q=1 / 40, steps=1)
    trainer.generators["sample"] = seeded_generator(0)
    # find a seed whose first Poisson draw is empty at q = 1/40 over 40 records
    for s in range(100):
        g = seeded_generator(s)
        if (torch.rand(40, generator=g, dtype=torch.float64) < 1 / 40).sum() == 0:
            trainer.generators["sample"] = seeded_generator(s)
            break
    before = {n: p.detach().clone() for n, p in trainer.params.items()}
    trainer.step()
    assert trainer.engine.calls == [0]             # the engine saw one empty batch (zero sums)
    assert len(trainer.ledger) == 1                # the step is still accounted
    assert all(not torch.equal(before[n], p) for n, p in trainer.params.items())  # every group stepped


def test_every_expert_steps_every_update_even_without_owners():
    trainer = _trainer(toy_records(30, skew=1.0), sigmas=(0.5, 0.5), steps=2, q=0.2)
    before = {n: p.detach().clone() for n, p in trainer.params.items()}
    trainer.run_steps(1)
    # experts 1 and 2 own no record at all; AdamW weight decay + noise still move them.
    for e in range(E):
        assert not torch.equal(before[f"experts.{e}.weight"], trainer.params[f"experts.{e}.weight"])


def test_alternating_schedule_steps_one_stream_at_a_time():
    trainer = _trainer(toy_records(40), schedule=Schedule((1, 2)), steps=3)
    sigmas_seen = []
    changed = []
    for _ in range(3):
        before = {n: p.detach().clone() for n, p in trainer.params.items()}
        trainer.step()
        sigmas_seen.append(trainer.ledger.events[-1][1])
        changed.append({("expert" if n.startswith("experts.") else "shared")
                        for n, p in trainer.params.items() if not torch.equal(before[n], p)})
    assert changed == [{"shared"}, {"expert"}, {"expert"}]
    assert sigmas_seen == pytest.approx([1.0, 2.0, 2.0])  # sigma_s alone, then sigma_e / sqrt(L), L = 1


def test_joint_step_records_joint_sigma():
    trainer = _trainer(toy_records(40), sigmas=(1.0, 2.0), steps=1)
    trainer.step()
    assert trainer.ledger.events[0][1] == pytest.approx((1 / 1.0**2 + 1 / 2.0**2) ** -0.5)


def test_budget_check_stops_before_the_step():
    trainer = _trainer(toy_records(40), ledger=ListLedger(budget_steps=2))
    trainer.epsilon_budget = 1.0
    trainer.run_steps(2)
    params = {n: p.detach().clone() for n, p in trainer.params.items()}
    with pytest.raises(BudgetExceededError):
        trainer.step()
    assert all(torch.equal(params[n], p) for n, p in trainer.params.items())
    with pytest.raises(BudgetExceededError, match="planned"):
        trainer.run_steps(3)


def test_resume_continues_params_ledger_and_generators(tmp_path):
    records = toy_records(40)
    full = _trainer(records, steps=4)
    full.run_steps(4)

    first = _trainer(records, steps=4)
    first.run_steps(2)
    first.save(tmp_path / "ck")
    second = _trainer(records, steps=4)
    second.resume(tmp_path / "ck", ListLedger.from_dict)
    assert second.state.step == 2 and len(second.ledger) == 2
    second.run_steps(2)
    assert second.ledger.events == full.ledger.events
    for n, p in full.params.items():
        torch.testing.assert_close(second.params[n], p, rtol=0, atol=0)


def test_fit_reports_public_things_only(tmp_path):
    trainer = _trainer(toy_records(40), steps=3)
    res = trainer.fit(progress=False)
    assert res["steps"] == 3 and len(res["evals"]) == 1 and 0.0 <= res["final_accuracy"] <= 1.0
    assert res["epsilon"] == pytest.approx(0.3)
    assert set(res["sigma"]) == {"shared", "expert"} and res["seconds_per_step"] > 0
    # The validation loss is shown (evaluation data); the training loss never is.
    assert math.isfinite(res["evals"][-1]["dev_loss"]) and res["evals"][-1]["dev_loss"] > 0
    text = repr(res).replace("dev_loss", "")
    for private in ("loss", "owner_counts", "batch_sizes", "realized"):
        assert private not in text


def test_zero_noise_is_reported_as_unaccounted():
    trainer = _trainer(toy_records(40), sigmas=(0.0, 0.0), steps=1)
    trainer.step()
    assert len(trainer.ledger) == 0 and math.isinf(trainer.epsilon_spent())


def _expert_deltas(denominator, optim):
    trainer = _trainer(toy_records(40), steps=1, sigmas=(0.5, 0.5), denominator=denominator, optim=optim)
    before = {n: p.detach().clone() for n, p in trainer.params.items()}
    trainer.step()
    return {e: (trainer.params[f"experts.{e}.weight"] - before[f"experts.{e}.weight"]) for e in range(E)}


def test_denominator_rescales_sgd_updates_but_barely_adamw():
    # Same sample and noise draws; only n_hat differs: public B*pi_hat_e vs uniform B/E.
    from raptor.training.config import OptimConfig

    sgd = OptimConfig(name="sgd", lr=0.1, weight_decay=0.0)
    pub, uni = _expert_deltas("public", sgd), _expert_deltas("uniform", sgd)
    for e, share in enumerate(SHARES[0]):
        # SGD step = -lr * sum / n_hat  =>  public / uniform = (B/E) / (B pi_e) = 1 / (E pi_e)
        torch.testing.assert_close(pub[e], uni[e] / (E * share), rtol=1e-4, atol=1e-7)
    adam = OptimConfig(name="adamw", lr=0.01, weight_decay=0.0)
    pub, uni = _expert_deltas("public", adam), _expert_deltas("uniform", adam)
    for e in range(E):
        # AdamW's first step is lr * m / (sqrt(v) + eps) = lr * sign(g) up to eps: scale-free.
        torch.testing.assert_close(pub[e], uni[e], rtol=1e-3, atol=1e-6)


def test_secure_mode_resumes_exactly_and_drops_generator_state_when_done(tmp_path):
    a, b = _trainer(toy_records(40), steps=2, secure=True), _trainer(toy_records(40), steps=2, secure=True)
    assert a.config.seed is None and a.config.privacy.secure_rng
    a.run_steps(1)
    b.run_steps(1)
    assert any(not torch.equal(p, b.params[n]) for n, p in a.params.items())  # independent secure streams
    a.save(tmp_path / "ck")
    assert (tmp_path / "ck" / "rng.pt").exists()  # mid-run: the stream's state, so the run continues exactly
    c = _trainer(toy_records(40), steps=2, secure=True)
    c.resume(tmp_path / "ck", ListLedger.from_dict)
    assert c.state.step == 1 and len(c.ledger) == 1
    a.run_steps(1)
    c.run_steps(1)
    assert all(torch.equal(p, c.params[n]) for n, p in a.params.items())  # the same run, bit for bit
    c.save(tmp_path / "final")
    assert not (tmp_path / "final" / "rng.pt").exists()  # a finished secure run keeps no generator state
