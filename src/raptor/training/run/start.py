"""How a run starts or continues: its initial weights (for exact resume) and the resume seam.

* :func:`initial_weights_writer`: checkpoint artifacts holding the model as it was when training
  started: every weight that is not read unchanged from a base checkpoint (:func:`raptor.data.model_source.base_weights`:
  a tiny family's random init, a freshly drawn head, ...), and the tokenizer. A resumed run loads
  them before anything is computed from the model (public routing, owner shares, layer choice,
  clip norms), so it recomputes the same public statistics instead of redrawing a model.
* :func:`start_run` / :func:`continue_run`: the one seam by which a run starts or continues a
  checkpoint, shared by :func:`raptor.training.run.fine_tune.fine_tune` (classification) and
  ``raptor train --objective generate``: on ``--resume`` the fingerprint is checked (a changed
  config or data set is refused, naming the fields) and the checkpoint's initial weights and
  tokenizer replace the freshly built ones; the trainer gets the initial-weights artifacts and the
  fingerprint for every checkpoint it writes, then continues the saved state.

The model a finished run leaves for use is written by :mod:`raptor.training.saving.final_model`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from raptor.errors import CheckpointError
from raptor.training.saving.checkpoint import full_state, resolve_checkpoint, verify_files

INITIAL = "initial.safetensors"
TOKENIZER = "tokenizer"


def initial_weights_writer(model: nn.Module, tokenizer, base: dict[str, tuple[int, ...]] | None = None) -> dict:
    """``{name: writer}`` artifacts for :func:`raptor.training.saving.checkpoint.save_checkpoint`: the weights
    of ``model`` that ``base`` (:func:`raptor.data.model_source.base_weights` of the directory it was loaded from) does not
    hold with the same shape, and the tokenizer."""
    base = base or {}
    state = {k: v for k, v in full_state(model).items() if base.get(k) != tuple(v.shape)}
    return {INITIAL: lambda p: save_file(state, str(p)),
            TOKENIZER: lambda p: tokenizer.save_pretrained(str(p))}


def load_initial_weights(checkpoint: str | Path, model: nn.Module):
    """Load the run's initial weights (those not in its base checkpoint) into ``model``; return
    ``(model, tokenizer)`` with the checkpoint's tokenizer."""
    from raptor.data import load_tokenizer
    from raptor.training.saving.checkpoint import read_state

    state = read_state(checkpoint)
    path = resolve_checkpoint(checkpoint)
    verify_files(path, state)
    file = path / INITIAL
    if not file.is_file():
        raise CheckpointError(f"{file}: missing; this checkpoint cannot be resumed exactly; start a new run")
    try:
        saved = load_file(str(file))
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{file}: cannot be read ({err}); start a new run") from err
    own = model.state_dict(keep_vars=True)
    if not set(saved) <= set(own) or any(saved[k].shape != own[k].shape for k in saved):
        raise CheckpointError(f"{file}: the initial weights do not fit this --model and its sizes; resume with "
                              "the model, sizes and tokenizer of the run that wrote the checkpoint")
    import torch

    with torch.no_grad():
        for k, t in saved.items():
            own[k].copy_(t)
    return model, load_tokenizer(path / TOKENIZER)


@dataclass(frozen=True)
class RunStart:
    """What :func:`start_run` settled: the model and tokenizer to train (on resume: with the
    checkpoint's initial weights and tokenizer), the initial-weights artifacts for every checkpoint,
    the fingerprint, and the checkpoint to continue (None for a new run)."""

    model: nn.Module
    tokenizer: object
    artifacts: dict
    fingerprint: dict
    resume: str | None


def start_run(model: nn.Module, tokenizer, *, fingerprint: dict, resume: str | Path | None,
              base: dict[str, tuple[int, ...]] | None = None) -> RunStart:
    """Before anything is computed from ``model`` (public routing, layer choice, clip norms, the
    tokenized records): on ``resume``, refuse a changed run (:func:`raptor.training.saving.fingerprint.check_resumable`,
    naming the differing fields) and load the checkpoint's initial weights and tokenizer, so nothing
    is redrawn; then capture the initial weights not in ``base`` (:func:`raptor.data.model_source.base_weights`) for the
    checkpoints this run will write."""
    if resume:
        from raptor.training.saving.fingerprint import check_resumable

        check_resumable(resume, fingerprint)
        model, tokenizer = load_initial_weights(resume, model)
    return RunStart(model=model, tokenizer=tokenizer, artifacts=initial_weights_writer(model, tokenizer, base),
                    fingerprint=fingerprint, resume=None if resume is None else str(resume))


def continue_run(trainer, start: RunStart) -> None:
    """Give ``trainer`` the run's checkpoint artifacts and fingerprint and, on resume, restore the
    checkpoint (weights, optimizers, ledger, generator states, step; the plan checked against the
    saved one)."""
    trainer.artifacts, trainer.fingerprint = start.artifacts, start.fingerprint
    if start.resume:
        from raptor.accounting.ledger import PrivacyLedger

        trainer.resume(start.resume, PrivacyLedger.from_dict)
