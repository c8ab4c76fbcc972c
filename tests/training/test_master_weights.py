"""float32 master weights for bf16 parameters: a tiny update that bf16 alone loses is kept, the
bf16 weights are refreshed from the masters, and checkpoints carry the masters."""

from __future__ import annotations

import pytest
import torch
from toy_engine import ListLedger, ToyEngine, ToyMoE, toy_records

from raptor.recipes import tiny_recipe
from raptor.roles.public_stats import group_denominators
from raptor.training.config import OptimConfig, PrivacyConfig
from raptor.training.step.master_weights import MasterWeightOptimizer, master_copies, with_master_weights
from raptor.training.step.noise_plans import FixedPlan
from raptor.training.step.plan import build_step_plan
from raptor.training.step.trainer import Trainer


def _sgd_steps(param: torch.nn.Parameter, steps: int, lr: float, masters: bool) -> torch.Tensor:
    if masters:
        m = master_copies({"w": param})["w"]
        opt = with_master_weights(torch.optim.SGD([m], lr=lr), [(m, param)])
        target = m
    else:
        opt, target = torch.optim.SGD([param], lr=lr), param
    for _ in range(steps):
        target.grad = torch.ones_like(target)
        opt.step()
        opt.zero_grad()
    return target


def test_a_tiny_update_that_bf16_loses_is_kept_by_the_master():
    # 1.0 - 1e-3: below half of bf16's spacing at 1 (2^-8), so bf16 SGD rounds every step back to 1
    naive = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    _sgd_steps(naive, 10, 1e-3, masters=False)
    assert torch.equal(naive.detach(), torch.ones(4, dtype=torch.bfloat16))  # bf16 alone: all 10 updates lost
    param = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    master = _sgd_steps(param, 10, 1e-3, masters=True)
    assert master.dtype == torch.float32
    torch.testing.assert_close(master.detach(), torch.full((4,), 0.99), rtol=0, atol=1e-6)
    assert torch.equal(param.detach(), master.detach().to(torch.bfloat16))  # refreshed from the master
    assert float(param.detach()[0]) < 1.0


def test_float32_parameters_are_their_own_masters():
    p = torch.nn.Parameter(torch.ones(3))
    m = master_copies({"p": p})["p"]
    opt = torch.optim.SGD([m], lr=0.1)
    assert m is p and with_master_weights(opt, [(m, p)]) is opt


def test_state_dict_round_trip_restores_masters_and_parameters():
    p = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    master = _sgd_steps(p, 3, 1e-3, masters=True)
    opt = MasterWeightOptimizer(torch.optim.SGD([master], lr=1e-3), [(master, p)])
    state = opt.state_dict()
    q = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    fresh = master_copies({"q": q})["q"]
    other = MasterWeightOptimizer(torch.optim.SGD([fresh], lr=1e-3), [(fresh, q)])
    other.load_state_dict(state)
    assert torch.equal(fresh, master) and torch.equal(q, p)
    with pytest.raises(ValueError, match="performance.dtype"):
        other.load_state_dict(torch.optim.SGD([fresh], lr=1e-3).state_dict())  # a float32 run's state


def _bf16_trainer(records, steps=3):
    model = ToyMoE().to(torch.bfloat16)
    engine = ToyEngine(model)
    groups = engine.group_map.groups
    noise = FixedPlan(0.25, steps, {"shared": 0.0, "expert": 0.0}, 1)
    plan = build_step_plan(noise, groups, clip_norms={k: 1.0 for k in groups}, trained_layers=(0,),
                           denominators=group_denominators(groups, batch_size=10, shares={0: [0.4, 0.3, 0.3]},
                                                           kind="public"), grouping="roles")
    cfg = tiny_recipe("raptor", steps=steps, batch_size=10,
                      privacy=PrivacyConfig(epsilon=None, noise_multipliers=(0.0, 0.0), secure_rng=False),
                      optim=OptimConfig(name="sgd", lr=2e-3, weight_decay=0.0))
    return Trainer(model=model, engine=engine, train=records, validation=None, plan=plan, ledger=ListLedger(),
                   config=cfg)


def test_trainer_steps_float32_masters_of_a_bf16_model_and_checkpoints_them(tmp_path):
    records = toy_records(40)
    trainer = _bf16_trainer(records)
    start = {n: m.detach().clone() for n, m in trainer.masters.items()}
    assert all(m.dtype == torch.float32 for m in trainer.masters.values())
    assert all(isinstance(o, MasterWeightOptimizer) for o in trainer.optimizers.values())
    trainer.run_steps(2)
    moved_master = moved_bf16 = 0
    for n, m in trainer.masters.items():
        p = trainer.params[n]
        assert p.dtype == torch.bfloat16 and torch.equal(p.detach(), m.detach().to(torch.bfloat16))
        changed = m.detach() != start[n]
        moved_master += int(changed.sum())
        moved_bf16 += int((p.detach() != start[n].to(torch.bfloat16)).sum())
    # most updates are below bf16's spacing: kept in the masters, invisible in the bf16 weights
    assert moved_master > 2 * moved_bf16
    trainer.save(tmp_path / "ck")
    again = _bf16_trainer(records)
    again.resume(tmp_path / "ck", ListLedger.from_dict)
    for n, m in trainer.masters.items():
        assert torch.equal(again.masters[n], m) and torch.equal(again.params[n], trainer.params[n])
    trainer.run_steps(1)
    again.run_steps(1)
    assert all(torch.equal(again.masters[n], m) for n, m in trainer.masters.items())
