"""Checks made before a run spends anything.

* :func:`check_output_dir`: the output directory is usable (not a file, writable, not holding
  another run unless overwriting is asked for), checked before any data is read.
* :func:`check_device`: the ``--device`` exists on this machine.
* :func:`check_model_name`: ``--model`` is a family name, a local model directory, or (only when a
  hub may be reached) a hub name; otherwise an immediate error listing what is available.

What a resumed run must share with the run that wrote its checkpoint is
:mod:`raptor.training.saving.fingerprint`.
"""

from __future__ import annotations

import os
from pathlib import Path

from raptor.errors import ConfigError

#: files whose presence in a directory means it holds a raptor run
RUN_MARKERS = ("results.json", "checkpoint", "model")

def check_output_dir(path: str | Path, *, overwrite: bool, resume: bool) -> Path:
    """Raise :class:`ConfigError` unless ``path`` can receive this run's outputs (give the flag's
    string: an empty one is refused, whereas ``Path("")`` would be the current directory)."""
    if str(path).strip() == "":
        raise ConfigError("--output-dir is empty; give a directory path (e.g. runs/my-run)")
    path = Path(path)
    if path.is_symlink() and not path.exists():  # mkdir would fail with "File exists"
        raise ConfigError(f"--output-dir {path}: is a symbolic link to a missing target ({os.readlink(path)}); "
                          "create the target directory, or choose another --output-dir")
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--output-dir {path}: is an existing file; give a directory path")
    parent = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if not parent.is_dir():
        raise ConfigError(f"--output-dir {path}: {parent} is a file, so the directory cannot be created")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"--output-dir {path}: {parent} is not writable; choose a directory you can write to")
    if path.is_dir() and not overwrite and not resume:
        held = [m for m in RUN_MARKERS if (path / m).exists()]
        if held:
            raise ConfigError(f"--output-dir {path}: already holds a run ({', '.join(held)}); choose a new "
                              "directory, pass --overwrite to replace it, or --resume PATH/checkpoint to continue it")
    return path


def check_device(device: str) -> None:
    """``--device`` names a device this machine has (``cpu``, ``cuda``, ``cuda:N``, ``mps``)."""
    import torch

    try:
        dev = torch.device(device)
    except RuntimeError as err:
        raise ConfigError(f"--device {device!r} is not a device name; use cpu, cuda, cuda:N or mps") from err
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"--device {device}: CUDA is not available on this machine (torch "
                              f"{torch.__version__}, no usable GPU); use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"--device {device}: MPS is not available on this machine; use --device cpu")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"--device {device}: unsupported device type {dev.type!r}; use cpu, cuda or mps")


def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether the Hugging Face hub can be used: huggingface_hub is not in offline mode and its
    endpoint accepts a TCP connection within ``timeout`` seconds (one try, instead of the
    library's minute of retries)."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    url = urlparse(constants.ENDPOINT)
    try:
        with socket.create_connection((url.hostname, url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def check_model_name(name: str, families, shipped=()) -> None:
    """``--model`` is a family, a shipped model's short name, a local directory with config.json, or a hub name when a hub may be
    reached; else an immediate error listing the families and the shipped models."""
    path = Path(name)
    if name in families or (name in shipped and not path.exists()):
        return
    if path.exists():
        if name in shipped:
            from raptor.shipped import report_shadowing, shadow_message

            if not (path / "config.json").is_file():
                raise ConfigError(f"{shadow_message(name, '--model')}; it is not a model directory "
                                  "(no config.json)")
            report_shadowing(name, "--model")
        if not (path / "config.json").is_file():
            raise ConfigError(f"--model {name}: not a model directory (no config.json); give a save_pretrained "
                              f"directory, a family ({', '.join(families)}) or a hub name")
        return
    looks_local = name.startswith((".", "/", "~")) or name.count("/") > 1 or "/" not in name
    if looks_local or not hub_reachable():
        why = "no such family or directory" if looks_local else "not a local directory, and the hub cannot be reached"
        ship = f"; shipped models: {', '.join(shipped)}" if shipped else "; no shipped models in this version"
        raise ConfigError(f"--model {name}: {why}. Families (random init): {', '.join(families)}{ship}")
