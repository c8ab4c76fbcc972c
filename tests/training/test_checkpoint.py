"""Checkpoint save/load: parameters, optimizer states, ledger dict, RNG states (seeded only)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from raptor.errors import ConfigError
from raptor.mechanisms import seeded_generator
from raptor.training.checkpoint import load_checkpoint, read_state, save_checkpoint


def _setup():
    torch_gen = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=torch_gen))
    model[0].bias.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.1)
    model(torch.ones(2, 3)).sum().backward()
    opt.step()
    return model, opt


def test_round_trip_seeded(tmp_path):
    model, opt = _setup()
    gen = seeded_generator(9)
    torch.rand(3, generator=gen)
    ledger = {"events": [[0.01, 1.1, 5]]}
    save_checkpoint(tmp_path / "ck", model=model, optimizers={"shared": opt}, ledger=ledger,
                    generators={"noise": gen}, secure_rng=False, step=5, config={"a": 1})
    expected_next = torch.rand(4, generator=gen)

    model2, opt2 = _setup()
    with torch.no_grad():
        for p in model2.parameters():
            p.zero_()
    gen2 = seeded_generator(123)
    state = load_checkpoint(tmp_path / "ck", model=model2, optimizers={"shared": opt2}, generators={"noise": gen2})
    assert state["step"] == 5 and state["ledger"] == ledger and state["config"] == {"a": 1}
    for (n, p), (_, q) in zip(model.named_parameters(), model2.named_parameters()):
        if p.requires_grad:
            assert torch.equal(p, q), n
        else:
            assert q.abs().sum() == 0, n  # frozen params are not in the checkpoint
    assert torch.equal(torch.rand(4, generator=gen2), expected_next)
    s1, s2 = opt.state_dict()["state"], opt2.state_dict()["state"]
    assert all(torch.equal(s1[k]["exp_avg"], s2[k]["exp_avg"]) for k in s1)


def test_secure_run_does_not_save_rng_state(tmp_path):
    model, opt = _setup()
    save_checkpoint(tmp_path / "ck", model=model, optimizers={"s": opt}, ledger={}, generators={"noise": seeded_generator(1)},
                    secure_rng=True, step=1, config={})
    assert not (tmp_path / "ck" / "rng.pt").exists()
    assert read_state(tmp_path / "ck")["rng_saved"] is False
    gen = seeded_generator(4)
    before = gen.get_state()
    load_checkpoint(tmp_path / "ck", model=model, optimizers={"s": opt}, generators={"noise": gen})
    assert torch.equal(gen.get_state(), before)


def test_overwrite_and_mismatch_errors(tmp_path):
    model, opt = _setup()
    kw = dict(optimizers={"s": opt}, ledger={}, generators={}, secure_rng=True, config={})
    save_checkpoint(tmp_path / "ck", model=model, step=1, **kw)
    save_checkpoint(tmp_path / "ck", model=model, step=2, **kw)
    assert read_state(tmp_path / "ck")["step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
    other = nn.Linear(3, 4)
    with pytest.raises(ConfigError, match="does not match"):
        load_checkpoint(tmp_path / "ck", model=other, optimizers={"s": opt}, generators={})
    with pytest.raises(ConfigError, match="no state.json"):
        read_state(tmp_path)
