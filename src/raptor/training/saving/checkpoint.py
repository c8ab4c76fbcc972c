"""Checkpoints: model weights, optimizer states, the privacy ledger, generator states, step, config.

Layout of a checkpoint directory::

    model.safetensors   the weights a resumed run needs (safetensors): the trainable parameters, or
                        (``weights="all"``) the whole state dict, for models whose frozen weights
                        were drawn at random rather than read from a base checkpoint
    optimizers.pt       {stream: optimizer.state_dict()} (torch.save, weights_only)
    rng.pt              {name: generator.get_state()} (torch.save, weights_only)
    <artifact>/         anything the caller adds (tokenizer, public statistics, ...)
    state.json          format, step, ledger, config, fingerprint, extra, and the SHA-256 of every
                        file above (written last)

Faults. A checkpoint is written to a temporary sibling directory (every file fsynced), then put in
place by renames, the previous checkpoint moved aside to ``<name>.old`` until the new one is in
place; a kill at any moment leaves either the new or the previous checkpoint complete, and
:func:`resolve_checkpoint` finds it. On load, every file is checked against the digest recorded in
``state.json`` before it is parsed, so a truncated or corrupted file is reported by name
(:class:`~raptor.errors.CheckpointError`), never as a traceback from a parser.

Privacy. Parameters and optimizer moments are post-processing of noisy releases, and the ledger
and config are public. The generator states are NOT public: with them, the Poisson samples and the
Gaussian noise of the steps that follow can be recomputed. They are saved so that a resumed run
continues the same run exactly (a resumed run never redraws anything). A checkpoint directory is
therefore as confidential as the training data: keep it where the data is kept and never publish
it. The final checkpoint of a secure run (``save_rng=False``) drops ``rng.pt``, since the run is
complete and nothing is left to resume; what is meant for release is the final model directory
and ``results.json``, which hold no generator state.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from raptor._hashing import sha256_file
from raptor.errors import CheckpointError, ConfigError

FORMAT = "raptor-checkpoint/2"
STATE = "state.json"
WEIGHTS = "model.safetensors"
OPTIMIZERS = "optimizers.pt"
RNG = "rng.pt"
OLD_SUFFIX = ".old"
TMP_SUFFIX = ".tmp"
_RESUME_HINT = "resume from an earlier copy, or start a new run"
_VERSION_HINT = ("damaged, or written by another raptor version; start a new run (or resume it with the raptor "
                 "version that wrote it)")


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """{name: detached contiguous copy} of the parameters that require grad."""
    return {n: p.detach().contiguous().clone() for n, p in model.named_parameters() if p.requires_grad}


def full_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """{name: detached contiguous copy} of every entry of the state dict (tied weights under each name)."""
    return {n: t.detach().contiguous().clone() for n, t in model.state_dict().items()}


def _fsync_file(file: Path) -> None:
    with file.open("rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
    weights: str = "trainable",
    save_rng: bool = True,
    fingerprint: dict | None = None,
    artifacts: Mapping[str, Callable[[Path], None]] | None = None,
) -> Path:
    """Write a checkpoint directory at ``path`` (replacing an existing one, atomically) and return it.

    ``weights``: ``"trainable"`` (parameters that require grad) or ``"all"`` (the whole state dict).
    ``artifacts``: ``{name: writer}``; each writer is called with ``<tmp>/<name>`` (a path that does
    not exist yet) and writes a file or directory there.
    """
    if weights not in ("trainable", "all"):
        raise ConfigError(f"weights must be 'trainable' or 'all', got {weights!r}")
    path = Path(path)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:  # a failed write (a full disk) leaves no half-written <name>.tmp behind; the last checkpoint stays
        digests = _write_contents(tmp, model, optimizers, generators, weights, save_rng, artifacts)
        from raptor import __version__

        state = {"format": FORMAT, "raptor_version": __version__, "step": int(step), "ledger": ledger,
                 "config": config, "weights": weights, "secure_rng": bool(secure_rng), "rng_saved": bool(save_rng),
                 "extra": extra or {}, "fingerprint": fingerprint or {}, "files": digests}
        _write_synced(tmp / STATE, json.dumps(state, indent=2, sort_keys=True))
        _fsync_dir(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = path.with_name(path.name + OLD_SUFFIX)
    if path.exists():
        if old.exists():
            shutil.rmtree(old)
        os.replace(path, old)  # from here until the next rename, the previous checkpoint is <name>.old
        os.replace(tmp, path)
        _fsync_dir(path.parent)
        shutil.rmtree(old)
    else:
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    return path


def _write_contents(tmp: Path, model, optimizers, generators, weights: str, save_rng: bool, artifacts) -> dict:
    """The checkpoint's files in ``tmp`` (weights, optimizer states, RNG states, artifacts), synced;
    returns {relative name: sha256}."""
    save_file(trainable_state(model) if weights == "trainable" else full_state(model), str(tmp / WEIGHTS))
    torch.save({k: opt.state_dict() for k, opt in optimizers.items()}, tmp / OPTIMIZERS)
    if save_rng:
        torch.save({k: g.get_state() for k, g in generators.items()}, tmp / RNG)
    for name, write in (artifacts or {}).items():
        write(tmp / name)
    digests = {}
    for file in sorted(p for p in tmp.rglob("*") if p.is_file()):
        _fsync_file(file)
        digests[file.relative_to(tmp).as_posix()] = sha256_file(file)
    return digests


def _write_synced(file: Path, text: str) -> None:
    with file.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def resolve_checkpoint(path: str | Path) -> Path:
    """The complete checkpoint at ``path``, or the previous one (``<path>.old``) if a kill interrupted
    the swap; :class:`CheckpointError` if there is none."""
    path = Path(path)
    if (path / STATE).is_file():
        return path
    old = path.with_name(path.name + OLD_SUFFIX)
    if not path.exists() and (old / STATE).is_file():
        return old
    if path.is_file():
        raise CheckpointError(f"--resume {path}: is a file; expected a checkpoint directory (OUTPUT_DIR/checkpoint)")
    if not path.exists():
        raise CheckpointError(f"--resume {path}: no such checkpoint directory; give OUTPUT_DIR/checkpoint of a run")
    raise CheckpointError(f"--resume {path}: not a raptor checkpoint (it has no {STATE}); "
                          "give the checkpoint directory a run wrote (OUTPUT_DIR/checkpoint)")


def read_state(path: str | Path) -> dict:
    """The ``state.json`` of a checkpoint (step, ledger dict, config dict, ...), checked for form."""
    path = resolve_checkpoint(path)
    file = path / STATE
    try:
        state = json.loads(file.read_text())
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{file}: corrupt checkpoint state (not UTF-8 text); {_RESUME_HINT}") from err
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{file}: corrupt or truncated checkpoint state (invalid JSON at line {err.lineno}: "
                              f"{err.msg}); {_RESUME_HINT}") from err
    if not isinstance(state, dict):
        raise CheckpointError(f"{file}: corrupt checkpoint state (expected a JSON object); {_RESUME_HINT}")
    if state.get("format") != FORMAT:
        from raptor import __version__

        written = f" (written by raptor {state['raptor_version']})" if isinstance(state.get("raptor_version"), str) \
            else ""
        fmt = "no format field" if state.get("format") is None else f"checkpoint format {state['format']!r}"
        raise CheckpointError(f"{file}: {fmt}{written}, but raptor {__version__} "
                              f"reads {FORMAT!r}: the checkpoint was written by another raptor version and cannot be "
                              "resumed; start a new run (or resume it with the raptor version that wrote it)")
    for key, kind in (("step", int), ("files", dict), ("config", dict), ("extra", dict), ("ledger", dict),
                      ("rng_saved", bool), ("weights", str), ("fingerprint", dict)):
        if not isinstance(state.get(key), kind) or kind is int and isinstance(state.get(key), bool):
            raise CheckpointError(f"{file}: field {key!r} is missing or not a {kind.__name__}; the checkpoint is "
                                  f"{_VERSION_HINT}")
    if state["step"] < 0:
        raise CheckpointError(f"{file}: step {state['step']} is negative; the checkpoint is {_VERSION_HINT}")
    state["path"] = str(path)
    return state


def verify_files(path: str | Path, state: dict) -> None:
    """Every file listed in ``state["files"]`` exists and has its recorded SHA-256."""
    path = Path(path)
    for name, digest in state["files"].items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"{file}: missing from the checkpoint; {_RESUME_HINT}")
        if sha256_file(file) != digest:
            raise CheckpointError(f"{file}: corrupt or truncated (its SHA-256 differs from the one recorded in "
                                  f"{path / STATE}); {_RESUME_HINT}")


def _restore_each(file: Path, targets: Mapping[str, object], what: str, load: Callable[[object, object], object],
                  errors: tuple[type[Exception], ...], failure: str) -> None:
    """Load ``file`` (a dict {name: state}, one per target) into ``targets`` by ``load(target, state)``:
    the optimizers and the generators of a run. Other names, or a state ``load`` refuses with one of
    ``errors``, raise :class:`CheckpointError` naming the file and the ``what``."""
    states = _torch_load(file)
    if not isinstance(states, dict) or set(states) != set(targets):
        got = sorted(states) if isinstance(states, dict) else type(states).__name__
        raise CheckpointError(f"{file}: has {what}s {got}, the run has {sorted(targets)}")
    for k, target in targets.items():
        try:
            load(target, states[k])
        except errors as err:
            raise CheckpointError(f"{file}: {what} {k!r} {failure} ({err})") from err


def _torch_load(file: Path):
    try:
        return torch.load(file, weights_only=True)
    except (RuntimeError, EOFError, pickle.UnpicklingError, ValueError, OSError) as err:
        raise CheckpointError(f"{file}: cannot be read ({type(err).__name__}: {str(err).splitlines()[0][:200]}); "
                              f"{_RESUME_HINT}") from err


def load_checkpoint(
    path: str | Path,
    *,
    model: nn.Module,
    optimizers: Mapping[str, torch.optim.Optimizer],
    generators: Mapping[str, torch.Generator],
    ledger_from_dict: Callable[[dict], object] | None = None,
) -> dict:
    """Restore weights, optimizer states and generator states in place; return the state dict
    (``step``, ``ledger``, ``config``, ``path``, ...). With ``ledger_from_dict`` (e.g.
    ``PrivacyLedger.from_dict``) the ledger is rebuilt into ``state["ledger_object"]``, and an
    invalid ledger is reported naming ``state.json``."""
    state = read_state(path)
    path = Path(state["path"])
    unlisted = [n for n in (WEIGHTS, OPTIMIZERS, *((RNG,) if state["rng_saved"] else ())) if n not in state["files"]]
    if unlisted:
        raise CheckpointError(f"{path / STATE}: records no SHA-256 for {', '.join(unlisted)}, so the file cannot be "
                              f"checked before it is loaded; the checkpoint is {_VERSION_HINT}")
    verify_files(path, state)
    ledger_object = None
    if ledger_from_dict is not None:
        try:
            ledger_object = ledger_from_dict(state["ledger"])
        except (ConfigError, KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"{path / STATE}: invalid privacy ledger ({err}); the run's privacy spending "
                                  "cannot be trusted, so it is not resumed; start a new run") from err
    file = path / WEIGHTS
    try:
        saved = load_file(str(file))
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{file}: cannot be read ({err}); {_RESUME_HINT}") from err
    if state["weights"] == "all":
        targets = dict(model.state_dict(keep_vars=True))
    else:
        targets = {n: p for n, p in model.named_parameters() if p.requires_grad}
    if set(saved) != set(targets):
        missing, unexpected = sorted(set(targets) - set(saved)), sorted(set(saved) - set(targets))
        raise CheckpointError(
            f"checkpoint {path} does not match the model's {state['weights']} weights "
            f"(missing {missing[:5]}, unexpected {unexpected[:5]}); resume with the same --model and --method"
        )
    with torch.no_grad():
        for n, p in targets.items():
            if saved[n].shape != p.shape:
                raise CheckpointError(f"checkpoint {path}: weight {n} has shape {tuple(saved[n].shape)}, "
                                      f"model has {tuple(p.shape)}; resume with the same --model and sizes")
            p.copy_(saved[n])
    _restore_each(path / OPTIMIZERS, optimizers, "optimizer", lambda opt, st: opt.load_state_dict(st),
                  (ValueError, KeyError, TypeError), "does not fit this run")
    if state["rng_saved"]:
        _restore_each(path / RNG, generators, "generator", lambda g, st: g.set_state(st),
                      (RuntimeError, TypeError), "state is invalid")
    state["ledger_object"] = ledger_object
    return state
