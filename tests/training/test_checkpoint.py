"""Checkpoint save/load: parameters, optimizer states, ledger dict, RNG states (seeded only)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from raptor.errors import ConfigError
from raptor.mechanisms import seeded_generator
from raptor.training.saving.checkpoint import load_checkpoint, read_state, save_checkpoint


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


def test_final_checkpoint_of_secure_run_drops_rng_state(tmp_path):
    model, opt = _setup()
    save_checkpoint(tmp_path / "ck", model=model, optimizers={"s": opt}, ledger={}, generators={"noise": seeded_generator(1)},
                    secure_rng=True, step=1, config={}, save_rng=False)
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


# ---------------------------------------------------------------------------- faults (issue 15, item 4)
def _saved(tmp_path, **kw):
    model, opt = _setup()
    from raptor.accounting.ledger import PrivacyLedger

    ledger = PrivacyLedger()
    ledger.record(0.01, 1.1, 3)
    save_checkpoint(tmp_path / "ck", model=model, optimizers={"s": opt}, ledger=ledger.to_dict(),
                    generators={"noise": seeded_generator(1)}, secure_rng=False, step=3, config={}, **kw)
    return model, opt, PrivacyLedger.from_dict


def _load(tmp_path, model, opt, from_dict):
    return load_checkpoint(tmp_path / "ck", model=model, optimizers={"s": opt}, generators={"noise": seeded_generator(2)},
                           ledger_from_dict=from_dict)


def _rehash(ck, name):
    """Record the current digest of ``name`` in state.json, so the PARSER of that file meets the damage."""
    import hashlib
    import json

    state = json.loads((ck / "state.json").read_text())
    state["files"][name] = hashlib.sha256((ck / name).read_bytes()).hexdigest()
    (ck / "state.json").write_text(json.dumps(state))


@pytest.mark.parametrize("name", ["model.safetensors", "optimizers.pt", "rng.pt"])
@pytest.mark.parametrize("damage", ["truncate", "garbage"])
@pytest.mark.parametrize("rehash", [False, True])
def test_damaged_file_is_named(tmp_path, name, damage, rehash):
    from raptor.errors import CheckpointError

    model, opt, from_dict = _saved(tmp_path)
    file = tmp_path / "ck" / name
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"\x00garbage" * 20)
    if rehash:
        _rehash(tmp_path / "ck", name)
    with pytest.raises(CheckpointError, match=name.replace(".", r"\.")):
        _load(tmp_path, model, opt, from_dict)


@pytest.mark.parametrize("text,match", [("{\"format\": \"raptor-check", "invalid JSON"), ("[1, 2]", "JSON object"),
                                        ("{\"format\": \"raptor-checkpoint/2\"}", "field 'step'")])
def test_corrupt_state_json_is_named(tmp_path, text, match):
    from raptor.errors import CheckpointError

    model, opt, from_dict = _saved(tmp_path)
    (tmp_path / "ck" / "state.json").write_text(text)
    with pytest.raises(CheckpointError, match=f"state.json.*{match}"):
        _load(tmp_path, model, opt, from_dict)


@pytest.mark.parametrize("ledger", [{"format": "nope"}, {"format": "raptor-ledger/1", "executed": [{"q": 1}]}, []])
def test_invalid_ledger_names_the_file(tmp_path, ledger):
    import json

    from raptor.errors import CheckpointError

    model, opt, from_dict = _saved(tmp_path)
    state = json.loads((tmp_path / "ck" / "state.json").read_text())
    if isinstance(ledger, dict) and ledger.get("format") == "raptor-ledger/1":
        ledger = dict(state["ledger"], executed=ledger["executed"])
    state["ledger"] = ledger
    (tmp_path / "ck" / "state.json").write_text(json.dumps(state))
    with pytest.raises(CheckpointError, match="state.json"):
        _load(tmp_path, model, opt, from_dict)


def test_kill_between_the_renames_leaves_the_previous_checkpoint(tmp_path):
    model, opt, from_dict = _saved(tmp_path)
    (tmp_path / "ck").rename(tmp_path / "ck.old")  # the moment between the two renames
    (tmp_path / "ck.tmp").mkdir()  # a half-written new one
    state = _load(tmp_path, model, opt, from_dict)
    assert state["step"] == 3 and state["path"].endswith("ck.old")


def test_sigkill_during_writes_leaves_a_loadable_checkpoint(tmp_path):
    """A child process rewrites a checkpoint in a loop and is killed with SIGKILL at a random time;
    the directory it leaves always loads (the new or the previous checkpoint)."""
    import os
    import select
    import signal
    import subprocess
    import sys
    import time

    script = f"""
import torch, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_checkpoint import _setup
from raptor.training.saving.checkpoint import save_checkpoint
from raptor.mechanisms import seeded_generator
model, opt = _setup()
step = 0
while True:
    step += 1
    save_checkpoint({str(tmp_path / 'ck')!r}, model=model, optimizers={{'s': opt}}, ledger={{}},
                    generators={{'noise': seeded_generator(1)}}, secure_rng=False, step=step, config={{}})
    print(step, flush=True)
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    first_timeout, exit_timeout = 300, 60  # the first checkpoint takes seconds; past these the child is hung
    for delay in (0.05, 0.13, 0.31):
        proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
        try:
            ready, _, _ = select.select([proc.stdout], [], [], first_timeout)  # readline alone could wait forever
            assert ready, f"the child wrote no checkpoint within {first_timeout} s (hung?)"
            assert proc.stdout.readline().strip(), "the child ended before its first checkpoint"
            time.sleep(delay)
        finally:
            proc.send_signal(signal.SIGKILL)
            try:
                proc.wait(timeout=exit_timeout)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the child did not exit within {exit_timeout} s of SIGKILL")
        model, opt = _setup()
        state = load_checkpoint(tmp_path / "ck", model=model, optimizers={"s": opt},
                                generators={"noise": seeded_generator(2)})
        assert state["step"] >= 1
