"""Every method on the same machinery: trains a tiny model; with zero noise and no clipping each DP
path equals plain training of the same trainable set, step for step.

Why the configurations below: RAPTOR's owner masking drops a record's gradient on non-owner
experts, so RAPTOR with noise 0 and no clipping is plain training of a *masked* objective, not of
the model's loss. With one expert per layer every token's expert is its record's owner, masking is
a no-op and the public denominator is B * 1 = B, so raptor and expert-only must equal plain
training exactly there. Dense methods (dpsgd, dp-lora, last-layer) and shared-only never mask, so
they are compared on a 4-expert model. SGD is used because AdamW's m / sqrt(v) turns rounding-level
gradient differences on near-zero coordinates into O(lr) parameter differences.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from tiny_records import DATA

from raptor.moe.models import TinySize, build_model
from raptor.recipes import tiny_recipe
from raptor.training.config import OptimConfig, PrivacyConfig
from raptor.training.methods import METHOD_SPECS
from raptor.training.run.assemble import build_trainer


def _scores(records, seed):
    """The same records with float regression targets in [0, 5) (STS-B's range)."""
    g = torch.Generator().manual_seed(seed)
    return {**records, "labels": torch.rand(records["labels"].shape[0], generator=g) * 5}


REGRESSION_DATA = {k: _scores(v, i) for i, (k, v) in enumerate(DATA.items())}


def _run(method, *, experts=4, plain=False, privacy=None, steps=3, optim=None, family="switch_transformers",
         regression=False):
    model = build_model(family, generator=torch.Generator().manual_seed(5),
                        size=TinySize(num_experts=experts, top_k=1), num_labels=1 if regression else 2)
    cfg = tiny_recipe(method, steps=steps, batch_size=8,
                      privacy=privacy or PrivacyConfig(epsilon=8.0, secure_rng=False),
                      optim=optim or OptimConfig(lr=1e-3))
    # plain: the method's trainable set with ordinary autograd (no clipping, no noise, nothing recorded)
    spec = replace(METHOD_SPECS[method], grouping=None, streams=()) if plain else None
    data = REGRESSION_DATA if regression else DATA
    trainer = build_trainer(cfg, model, train=data["train"], validation=data["validation"],
                            public=data["public"], spec=spec)
    results = trainer.fit(progress=False)
    return trainer, results


FIXED = PrivacyConfig(epsilon=None, noise_multipliers=(1.0, 1.0), secure_rng=False)


@pytest.mark.parametrize("method", list(METHOD_SPECS))
def test_each_method_trains_a_tiny_model(method):
    # Fixed sigmas keep this fast (no calibration); the ledger still records every step.
    trainer, res = _run(method, privacy=FIXED, steps=2)
    assert res["steps"] == 2 and 0.0 <= res["final_accuracy"] <= 1.0
    if method == "nonprivate":
        assert math.isinf(res["epsilon"]) and trainer.ledger is None
    else:
        assert 0 < res["epsilon"] < math.inf and len(trainer.ledger) == 2
    streams = {g["stream"] for g in res["streams"]["groups"].values()}
    expected = {"raptor": {"shared", "expert"}, "expert-only": {"expert"}}.get(method, {"shared"})
    assert streams == expected
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and not any(".router." in n for n in trainable)


def test_calibrated_raptor_run_stays_within_budget():
    trainer, res = _run("raptor", privacy=PrivacyConfig(epsilon=2.0, secure_rng=False), steps=2)
    plan = trainer.plan.noise  # the calibrated BudgetPlan behind the step plan
    assert plan.steps == 2 and plan.sigma_shared > 0 and plan.sigma_expert > 0
    assert res["epsilon"] <= 2.0 and res["delta"] == plan.delta < 1 / 48
    assert res["sigma"] == {"shared": plan.sigma_shared, "expert": plan.sigma_expert}


ZERO = PrivacyConfig(epsilon=None, clip_shared=math.inf, clip_expert=math.inf, noise_multipliers=(0.0, 0.0),
                     secure_rng=False)
SGD = OptimConfig(name="sgd", lr=0.5, weight_decay=0.0)


def _assert_same_trained_parameters(dp, ref):
    """Every trainable parameter of the DP run equals the plain run's (at least one is compared)."""
    dp_params = dict(dp.model.named_parameters())
    trained = [(name, p) for name, p in ref.model.named_parameters() if p.requires_grad]
    assert trained
    for name, p in trained:
        torch.testing.assert_close(dp_params[name], p, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize(
    "method, experts",
    [("dpsgd", 4), ("dp-lora", 4), ("last-layer", 4), ("shared-only", 4), ("raptor", 1), ("expert-only", 1),
     ("dp-lora/olmoe", 4), ("raptor/olmoe", 1)],
)
def test_zero_noise_no_clipping_equals_plain_training(method, experts):
    method, _, family = method.partition("/")
    family = family or "switch_transformers"
    dp, _ = _run(method, experts=experts, privacy=ZERO, optim=SGD, family=family)
    ref, _ = _run(method, experts=experts, plain=True, privacy=ZERO, optim=SGD, family=family)
    _assert_same_trained_parameters(dp, ref)


@pytest.mark.parametrize("method", list(METHOD_SPECS))
def test_each_method_trains_a_regression_head(method):
    trainer, res = _run(method, privacy=FIXED, steps=2, regression=True)
    assert res["steps"] == 2 and res["final_accuracy"] is None and res["main_metric"] == "pearson"
    assert set(res["final_metrics"]) == {"pearson", "spearman"}
    assert all(-1.0 <= v <= 1.0 for v in res["final_metrics"].values())
    assert res["evals"][-1]["dev_loss"] > 0  # mean squared error
    assert res["nonfinite_records_diagnostic_not_dp"] == 0


@pytest.mark.parametrize("method, experts", [("dpsgd", 4), ("raptor", 1), ("raptor/olmoe", 1), ("dp-lora", 4)])
def test_zero_noise_no_clipping_equals_plain_training_for_regression(method, experts):
    method, _, family = method.partition("/")
    family = family or "switch_transformers"
    # lr 0.05: squared error on targets in [0, 5) diverges at the classification tests' lr 0.5, and a
    # diverging run turns rounding into visible parameter differences
    sgd = OptimConfig(name="sgd", lr=0.05, weight_decay=0.0)
    dp, _ = _run(method, experts=experts, privacy=ZERO, optim=sgd, family=family, regression=True)
    ref, _ = _run(method, experts=experts, plain=True, privacy=ZERO, optim=sgd, family=family, regression=True)
    _assert_same_trained_parameters(dp, ref)


def test_raptor_masking_is_not_plain_training_with_several_experts():
    # The counterpart of the test above: with 4 experts, owner masking changes expert updates.
    dp, _ = _run("raptor", experts=4, privacy=ZERO, optim=SGD)
    ref, _ = _run("raptor", experts=4, plain=True, privacy=ZERO, optim=SGD)
    ref_params = dict(ref.model.named_parameters())
    diffs = [float((p - ref_params[n]).detach().abs().max()) for n, p in dp.model.named_parameters()
             if p.requires_grad and ".experts." in n]
    assert max(diffs) > 1e-4


def test_resume_continues_ledger_and_parameters_exactly(tmp_path):
    from raptor.accounting.ledger import PrivacyLedger

    def fresh():
        model = build_model("switch_transformers", generator=torch.Generator().manual_seed(5),
                            size=TinySize(num_experts=4, top_k=1))
        cfg = tiny_recipe("raptor", steps=4, batch_size=8, privacy=FIXED, optim=OptimConfig(lr=1e-3))
        return build_trainer(cfg, model, train=DATA["train"], validation=DATA["validation"], public=DATA["public"])

    full = fresh()
    full.run_steps(4)
    first = fresh()
    first.run_steps(2)
    first.save(tmp_path / "ck")
    second = fresh()
    second.resume(tmp_path / "ck", PrivacyLedger.from_dict)
    assert len(second.ledger) == 2
    second.run_steps(2)
    assert second.ledger.to_dict() == full.ledger.to_dict()
    assert second.epsilon_spent() == full.epsilon_spent()
    for name, p in full.params.items():
        assert torch.equal(second.params[name], p), name


def test_median_ratio_clip_norms_come_from_public_norms():
    priv = PrivacyConfig(epsilon=None, noise_multipliers=(1.0, 1.0), secure_rng=False, clip_rule="median-ratio",
                         clip_expert=2.0)
    model = build_model("switch_transformers", generator=torch.Generator().manual_seed(5),
                        size=TinySize(num_experts=4, top_k=1))
    cfg = tiny_recipe("raptor", steps=1, batch_size=8, privacy=priv, layers=(1,))
    trainer = build_trainer(cfg, model, train=DATA["train"], validation=None, public=DATA["public"])
    clips = {str(r.key): r.clip_norm for r in trainer.plan.groups if r.key.is_expert}
    assert len(clips) == 4 and len(set(clips.values())) > 1
    assert sorted(clips.values())[1] <= 2.0 <= sorted(clips.values())[2]
    trainer.run_steps(1)


@pytest.mark.parametrize("family", ["olmoe", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3"])
def test_raptor_trains_every_family(family):
    model = build_model(family, generator=torch.Generator().manual_seed(5))
    trainer = build_trainer(tiny_recipe("raptor", steps=1, batch_size=8, privacy=FIXED), model,
                            train=DATA["train"], validation=DATA["validation"], public=DATA["public"])
    res = trainer.fit(progress=False)
    assert res["steps"] == 1 and len(trainer.ledger) == 1
    assert {g["stream"] for g in res["streams"]["groups"].values()} == {"shared", "expert"}


def test_public_statistics_never_see_private_records(monkeypatch):
    # Routing statistics, layer choice and per-expert clip norms are computed before training from
    # the public corpus only: every batch routed, and every unclipped (clip = inf) engine call, must
    # consist of public rows; private rows reach the engine only through clipped compute calls.
    from raptor.per_sample.engine import PerRecordEngine

    public_rows = {tuple(r.tolist()) for r in DATA["public"]["input_ids"]}
    private_rows = {tuple(r.tolist()) for r in DATA["train"]["input_ids"]}
    assert not public_rows & private_rows
    seen = {"route": [], "unclipped": [], "clipped": []}
    route, compute = PerRecordEngine.route, PerRecordEngine.compute

    def spy_route(self, batch):
        seen["route"].extend(tuple(r.tolist()) for r in batch["input_ids"])
        return route(self, batch)

    def spy_compute(self, batch, clip_norms):
        kind = "unclipped" if all(math.isinf(c) for c in clip_norms.values()) else "clipped"
        seen[kind].extend(tuple(r.tolist()) for r in batch["input_ids"])
        return compute(self, batch, clip_norms)

    monkeypatch.setattr(PerRecordEngine, "route", spy_route)
    monkeypatch.setattr(PerRecordEngine, "compute", spy_compute)
    priv = PrivacyConfig(epsilon=None, noise_multipliers=(1.0, 1.0), secure_rng=False, clip_rule="median-ratio")
    model = build_model("switch_transformers", generator=torch.Generator().manual_seed(5))
    trainer = build_trainer(tiny_recipe("raptor", steps=2, batch_size=8, privacy=priv), model,
                            train=DATA["train"], validation=None, public=DATA["public"])
    trainer.run_steps(2)
    assert seen["route"] and set(seen["route"]) <= public_rows
    assert seen["unclipped"] and set(seen["unclipped"]) <= public_rows
    # a training micro-batch drops its all-padding columns (raptor.training.step.micro_batch.trim_padding):
    # each clipped row is a private row, whole or cut short of columns masked out in its micro-batch
    assert seen["clipped"] and all(any(p[:len(r)] == r for p in private_rows) for r in set(seen["clipped"]))
