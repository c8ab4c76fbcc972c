"""A content-addressed cache of the public routing (:func:`raptor.training.setup.public_stage.public_routing`).

Routing the public corpus is the costliest part of a short run's set-up on a CPU (the 338 public
records of ``minilm-moe`` at 128 tokens: about 20 s on one core), and for a model loaded from a
directory it is the same on every run: a deterministic function of the weights before the head,
the public records and how they are batched. :func:`cached_public_routing` keys the owners by a
SHA-256 of exactly those inputs (every weight and buffer but the classification head's, the public
records' tensors, the evaluation batch size, device type, dtype and the torch version) and keeps
them in ``$RAPTOR_CACHE/public_routing/<key>.pt``. A changed weight, corpus, length or batching is
another key; an unreadable or malformed entry is recomputed and replaced; a cache that cannot be
written is skipped (the run does not depend on it).

Privacy: public records and public-derived owners only (privacy rule 2); nothing private is read,
keyed or stored.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from torch import nn

from raptor.training.setup.head_init import HEAD_ATTRS

Owners = dict[int, torch.Tensor]


def _is_head(name: str) -> bool:
    """The classification head's own entries: a top-level ``classifier``/``score`` (under a PEFT
    wrapper's ``base_model.model.`` too), never a router's ``classifier`` deeper in the model."""
    for prefix in ("base_model.model.", ""):
        if name.startswith(prefix) and name[len(prefix):].split(".", 1)[0] in HEAD_ATTRS:
            return True
    return False


def routing_key(model: nn.Module, public: Mapping[str, torch.Tensor], *, batch_size: int, device: str,
                dtype: str) -> str:
    """The SHA-256 (hex) of what the public routing depends on (the module docstring)."""
    h = hashlib.sha256()
    h.update(f"raptor-public-routing-v1|torch {torch.__version__}|batch {batch_size}|{torch.device(device).type}|"
             f"{dtype}|{type(model).__name__}".encode())
    for name, t in sorted(model.state_dict().items()):
        if _is_head(name):
            continue
        t = t.detach().to("cpu").contiguous()
        h.update(f"|{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    for name in sorted(k for k in public if k != "labels"):
        t = public[name].detach().to("cpu").contiguous()
        h.update(f"|public {name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _valid(entry, key: str, num_records: int) -> bool:
    if not isinstance(entry, dict) or entry.get("key") != key or not isinstance(entry.get("owners"), dict):
        return False
    return all(isinstance(k, int) and isinstance(v, torch.Tensor) and v.dtype == torch.long and v.ndim == 1
               and v.shape[0] == num_records for k, v in entry["owners"].items())


def cached_public_routing(model: nn.Module, public: Mapping[str, torch.Tensor], config,
                          compute: Callable[[], Owners], root: Path | None) -> Owners:
    """``compute()`` (the public routing), read from or written to ``root`` (None: no cache)."""
    if root is None or int(public["labels"].shape[0]) == 0:
        return compute()
    perf = config.performance
    key = routing_key(model, public, batch_size=perf.eval_batch_size, device=perf.device, dtype=perf.dtype)
    path = Path(root) / f"{key}.pt"
    n = int(public["labels"].shape[0])
    if path.is_file():
        try:
            entry = torch.load(path, map_location="cpu", weights_only=True)
        except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError):  # truncated or foreign
            entry = None  # recomputed and replaced below
        if _valid(entry, key, n):
            return {int(k): v for k, v in entry["owners"].items()}
    owners = compute()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"key": key, "owners": {int(k): v.detach().cpu().long() for k, v in owners.items()}}, tmp)
        os.replace(tmp, path)
    except OSError:  # a read-only or full cache: the run goes on without it
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
    return owners


def routing_cache_dir(model_name: str | None) -> Path | None:
    """Where a run on ``model_name`` caches its public routing: ``$RAPTOR_CACHE/public_routing`` for a
    model loaded from a directory (a built, shipped or saved one), None otherwise (a tiny random
    family's weights are new on every run)."""
    from raptor.shipped import BUILT, SHIPPED, cache_root

    if not model_name or not (model_name in SHIPPED or model_name in BUILT or Path(model_name).is_dir()):
        return None

    return cache_root() / "public_routing"
