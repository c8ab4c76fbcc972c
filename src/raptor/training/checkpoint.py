"""Checkpoints: trainable parameters, optimizer states, the privacy ledger, RNG states, step, config.

Layout of a checkpoint directory::

    trainable.safetensors   requires_grad parameters by name (safetensors)
    optimizers.pt           {stream: optimizer.state_dict()} (torch.save)
    rng.pt                  {name: generator.get_state()} -- SEEDED runs only
    state.json              format, step, ledger (PrivacyLedger.to_dict()), config, secure_rng, extra

Privacy: parameters and optimizer moments are post-processing of noisy releases, and the ledger
and config are public, so they may be saved. A generator's state is not: it determines the
Poisson samples and the noise. Checkpoints of secure runs therefore omit ``rng.pt``, and a resumed
secure run draws fresh generators from the OS CSPRNG (fresh, independent randomness: the guarantee
and the ledger are unaffected). Seeded runs save it so that a resumed run continues bit for bit
(seeded mode is not secure anyway: the seed is in the config).

A checkpoint is written to a temporary sibling directory and renamed into place, so a crash never
leaves a half-written checkpoint under the final name.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from raptor.errors import ConfigError

FORMAT = "raptor-checkpoint/1"


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """{name: detached contiguous copy} of the parameters that require grad."""
    return {n: p.detach().contiguous().clone() for n, p in model.named_parameters() if p.requires_grad}


def save_checkpoint(
    path: str | Path,
    *,
    model: nn.Module,
    optimizers: Mapping[str, torch.optim.Optimizer],
    ledger: dict,
    generators: Mapping[str, torch.Generator],
    secure_rng: bool,
    step: int,
    config: dict,
    extra: dict | None = None,
) -> Path:
    """Write a checkpoint directory at ``path`` (replacing an existing one) and return it."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    save_file(trainable_state(model), str(tmp / "trainable.safetensors"))
    torch.save({k: opt.state_dict() for k, opt in optimizers.items()}, tmp / "optimizers.pt")
    if not secure_rng:
        torch.save({k: g.get_state() for k, g in generators.items()}, tmp / "rng.pt")
    state = {"format": FORMAT, "step": int(step), "ledger": ledger, "config": config,
             "secure_rng": bool(secure_rng), "rng_saved": not secure_rng, "extra": extra or {}}
    (tmp / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True))
    if path.exists():
        old = path.with_name(path.name + ".old")
        if old.exists():
            shutil.rmtree(old)
        os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old)
    else:
        os.replace(tmp, path)
    return path


def read_state(path: str | Path) -> dict:
    """The ``state.json`` of a checkpoint (step, ledger dict, config dict, ...)."""
    file = Path(path) / "state.json"
    if not file.is_file():
        raise ConfigError(f"{path} is not a raptor checkpoint: it has no state.json")
    state = json.loads(file.read_text())
    if state.get("format") != FORMAT:
        raise ConfigError(f"{file}: unknown checkpoint format {state.get('format')!r}, expected {FORMAT!r}")
    return state


def load_checkpoint(
    path: str | Path,
    *,
    model: nn.Module,
    optimizers: Mapping[str, torch.optim.Optimizer],
    generators: Mapping[str, torch.Generator],
) -> dict:
    """Restore parameters, optimizer states and (seeded runs) generator states in place; return
    the state dict (``step``, ``ledger``, ``config``, ...). The caller rebuilds the ledger with
    ``PrivacyLedger.from_dict(state["ledger"])`` so the resumed run continues it."""
    path = Path(path)
    state = read_state(path)
    saved = load_file(str(path / "trainable.safetensors"))
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    if set(saved) != set(params):
        missing, unexpected = sorted(set(params) - set(saved)), sorted(set(saved) - set(params))
        raise ConfigError(
            f"checkpoint {path} does not match the model's trainable parameters "
            f"(missing {missing[:5]}, unexpected {unexpected[:5]}); resume with the same model and method"
        )
    with torch.no_grad():
        for n, p in params.items():
            if saved[n].shape != p.shape:
                raise ConfigError(f"checkpoint {path}: parameter {n} has shape {tuple(saved[n].shape)}, "
                                  f"model has {tuple(p.shape)}")
            p.copy_(saved[n])
    opt_states = torch.load(path / "optimizers.pt", weights_only=True)
    if set(opt_states) != set(optimizers):
        raise ConfigError(f"checkpoint {path} has optimizers {sorted(opt_states)}, run has {sorted(optimizers)}")
    for k, opt in optimizers.items():
        opt.load_state_dict(opt_states[k])
    if state["rng_saved"]:
        rng = torch.load(path / "rng.pt", weights_only=True)
        if set(rng) != set(generators):
            raise ConfigError(f"checkpoint {path} has generators {sorted(rng)}, run has {sorted(generators)}")
        for k, g in generators.items():
            g.set_state(rng[k])
    return state
