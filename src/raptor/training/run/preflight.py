"""Checks made before a run spends anything, and the fingerprint that ties a checkpoint to its run.

* :func:`check_output_dir`: the output directory is usable (not a file, writable, not holding
  another run unless overwriting is asked for), checked before any data is read.
* :func:`check_device`: the ``--device`` exists on this machine.
* :func:`check_model_name`: ``--model`` is a family name, a local model directory, or (only when a
  hub may be reached) a hub name; otherwise an immediate error listing what is available.
* :func:`flag_message`: ``PrivacyConfig.epsilon must be ...`` becomes ``--epsilon must be ...``.
* :func:`fingerprint` / :func:`fingerprint_differences`: what a resumed run must share with the
  run that wrote the checkpoint (config fields and digests of the records).
* :func:`plan_differences`: the saved and the recomputed plan and public statistics compared,
  floats within a relative tolerance of :data:`PLAN_REL_TOL` (1e-6), the rest exactly.

Privacy: the record digests are SHA-256 of the private records; they are kept in the
checkpoint only (as confidential as the data, see :mod:`raptor.training.checkpoint`), never in
results.json.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from raptor._hashing import sha256_file
from raptor.errors import ConfigError

#: files whose presence in a directory means it holds a raptor run
RUN_MARKERS = ("results.json", "checkpoint", "model")

#: config field (dotted, as in TrainConfig.to_dict) -> the ``raptor train`` flag that sets it
FIELD_FLAGS: dict[str, str] = {
    "method": "--method", "epochs": "--epochs", "steps": "--steps", "batch_size": "--batch-size",
    "seed": "--seed", "layers": "--layers", "num_auto_layers": "--num-auto-layers", "eval_every": "--eval-every",
    "max_length": "--max-length", "privacy.epsilon": "--epsilon", "privacy.delta": "--delta",
    "privacy.clip_shared": "--clip", "privacy.clip_expert": "--clip-expert", "privacy.clip_rule": "--clip-rule",
    "privacy.shared_ratio": "--shared-ratio", "privacy.adjacency": "--adjacency",
    "privacy.accountant": "--accountant", "privacy.schedule.alternate": "--alternate", "privacy.denominator": "--denominator",
    "privacy.secure_rng": "--seed", "performance.micro_batch_size": "--micro-batch-size",
    "performance.device": "--device", "optim.name": "--optimizer", "optim.lr": "--lr",
    "optim.lr_expert": "--lr-expert", "performance.memory_budget_mib": "--memory-budget-mib",
    "lora_rank": "--lora-rank", "objective": "--objective", "freeze_shared_experts": "--freeze-shared-experts",
}
_CLASS_PREFIX = {"TrainConfig": "", "PrivacyConfig": "privacy.", "PerformanceConfig": "performance.",
                 "OptimConfig": "optim.", "Schedule": "privacy.schedule."}
#: fingerprint fields of ``--objective generate`` runs only (not in TrainConfig)
GENERATE_FIELDS = frozenset({"freeze_shared_experts"})
#: fields that may differ between a run and its resumption (they change no release)
RESUMABLE_FIELDS = ("eval_every", "output_dir", "performance.micro_batch_size", "performance.eval_batch_size",
                    "performance.device", "performance.memory_budget_mib")


def flag_message(err: ConfigError) -> ConfigError:
    """The same error with a config field name replaced by the flag that sets it."""
    text = str(err)
    m = re.match(r"^(\w+)\.(\w+) (.*)$", text, re.S)
    if m and m.group(1) in _CLASS_PREFIX:
        flag = FIELD_FLAGS.get(_CLASS_PREFIX[m.group(1)] + m.group(2))
        if flag:
            return ConfigError(f"{flag} {m.group(3)}")
    return err


def check_output_dir(path: str | Path, *, overwrite: bool, resume: bool) -> Path:
    """Raise :class:`ConfigError` unless ``path`` can receive this run's outputs (give the flag's
    string: an empty one is refused, whereas ``Path("")`` would be the current directory)."""
    if str(path).strip() == "":
        raise ConfigError("--output-dir is empty; give a directory path (e.g. runs/my-run)")
    path = Path(path)
    if path.is_symlink() and not path.exists():  # mkdir would fail with "File exists" (issue 35)
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
        if not (path / "config.json").is_file():
            raise ConfigError(f"--model {name}: not a model directory (no config.json); give a save_pretrained "
                              f"directory, a family ({', '.join(families)}) or a hub name")
        return
    looks_local = name.startswith((".", "/", "~")) or name.count("/") > 1 or "/" not in name
    if looks_local or not hub_reachable():
        why = "no such family or directory" if looks_local else "not a local directory, and the hub cannot be reached"
        ship = f"; shipped models: {', '.join(shipped)}" if shipped else "; no shipped models in this version"
        raise ConfigError(f"--model {name}: {why}. Families (random init): {', '.join(families)}{ship}")


def _digest(data) -> str | None:
    """SHA-256 of a record set: a :class:`~raptor.data.ClassificationData` (texts, second texts,
    labels, label names), a :class:`~raptor.data.qa.QAData` (prompts, answers) or a
    :class:`~raptor.data.vqa.VQAData` (the bytes of each image, questions, answers)."""
    if data is None:
        return None
    import json

    if hasattr(data, "images"):  # VQA: an image edited in place is different data
        payload = ["vqa", [sha256_file(p) for p in data.images], list(data.questions), list(data.answers)]
    elif hasattr(data, "prompts"):
        payload = ["qa", list(data.prompts), list(data.answers)]
    else:
        payload = [list(data.texts), None if data.text_pairs is None else list(data.text_pairs), list(data.labels),
                   list(data.label_names)]
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def fingerprint(config_dict: dict, *, model: str, train, public, validation, label_names, public_source) -> dict:
    """What must be equal for a checkpoint to be resumed: the config (less :data:`RESUMABLE_FIELDS`),
    the model, the label names, the public source and the digests of the record sets (raw texts and
    labels, so a mismatch is found before anything is tokenized). ``validation``: one split, or
    ``{name: split}``."""
    import json

    cfg = {k: v for k, v in _flatten(config_dict).items() if k not in RESUMABLE_FIELDS}
    cfg = json.loads(json.dumps(cfg, default=str))  # tuples as lists, as read back from state.json
    if isinstance(validation, dict):
        dev = _digest_text(json.dumps({k: _digest(v) for k, v in validation.items()})) if validation else None
    else:
        dev = _digest(validation)
    return {"config": cfg, "model": str(model), "label_names": list(label_names), "public_source": public_source,
            "data": {"private records": _digest(train), "public records": _digest(public), "dev records": dev}}


def _digest_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def fingerprint_differences(saved: dict, now: dict) -> list[str]:
    """Human-readable differences, flags named; a changed method or objective said in words first."""
    out = []
    s_cfg, n_cfg = saved.get("config", {}), now.get("config", {})
    if s_cfg.get("method") != n_cfg.get("method"):
        out.append(f"the method changed: the checkpoint was written by a --method {s_cfg.get('method')} run, "
                   f"this run asks for --method {n_cfg.get('method')}")
    s_obj, n_obj = s_cfg.get("objective", "classify"), n_cfg.get("objective", "classify")
    if s_obj != n_obj:
        out.append(f"the objective changed: the checkpoint was written by a --objective {s_obj} run, "
                   f"this run asks for --objective {n_obj}")
    skip = {"method", "objective"} | (GENERATE_FIELDS if s_obj != n_obj else set())
    for key in sorted(set(s_cfg) | set(n_cfg)):
        if key in skip or s_cfg.get(key) == n_cfg.get(key):
            continue
        out.append(f"{FIELD_FLAGS.get(key, key)} ({key}): {s_cfg.get(key)!r} -> {n_cfg.get(key)!r}")
    for key in ("model", "label_names", "public_source"):
        if saved.get(key) != now.get(key):
            out.append(f"{key}: {saved.get(key)!r} -> {now.get(key)!r}")
    for key, value in now.get("data", {}).items():
        if saved.get("data", {}).get(key) != value:
            out.append(f"{key}: different records (the data file or its size changed)")
    return out


#: relative tolerance of :func:`plan_differences`: the public statistics (owner shares, n_hat, clip
#: norms) are recomputed by a resumed run from the same public data and initial weights; another
#: device or kernel may round them differently in the last bits, which is not a different run
PLAN_REL_TOL: float = 1e-6


def plan_differences(saved, now, *, rel_tol: float = PLAN_REL_TOL, path: str = "plan") -> list[str]:
    """Where two plans (``StepPlan.to_dict()`` as read back from JSON) differ: floats beyond a
    relative tolerance ``rel_tol`` (``|a - b| <= rel_tol * max(|a|, |b|)``; inf and nan only equal
    themselves), everything else (layers, group names, counts, strings) exactly. Returns
    ``"path: saved -> now"`` lines (at most 5, then a count)."""
    import math

    out: list[str] = []

    def walk(a, b, where: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b), key=str):
                if k not in a or k not in b:
                    out.append(f"{where}.{k}: {'missing' if k not in a else repr(a[k])} -> "
                               f"{'missing' if k not in b else repr(b[k])}")
                else:
                    walk(a[k], b[k], f"{where}.{k}")
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                walk(x, y, f"{where}[{i}]")
        elif isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool) \
                or isinstance(b, float) and isinstance(a, (int, float)) and not isinstance(a, bool):
            a, b = float(a), float(b)
            same = a == b or (math.isnan(a) and math.isnan(b)) or \
                (math.isfinite(a) and math.isfinite(b) and abs(a - b) <= rel_tol * max(abs(a), abs(b)))
            if not same:
                out.append(f"{where}: {a!r} -> {b!r}")
        elif a != b or type(a) is not type(b):
            out.append(f"{where}: {a!r} -> {b!r}")

    walk(saved, now, path)
    return out[:5] + ([f"and {len(out) - 5} more"] if len(out) > 5 else [])


def check_resumable(checkpoint, now: dict) -> None:
    """:class:`ConfigError` listing what differs between this run and the checkpoint's run."""
    from raptor.errors import CheckpointError
    from raptor.training.checkpoint import STATE, read_state

    state = read_state(checkpoint)
    saved = state["fingerprint"]
    s_cfg = saved.get("config") if isinstance(saved.get("config"), dict) else {}
    same_objective = s_cfg.get("objective", "classify") == now.get("config", {}).get("objective", "classify")
    optional = {"objective"} | GENERATE_FIELDS  # a classification run's fingerprint has none of them
    lacks = [k for k in now if k not in saved] + [f"config.{k}" for k in now.get("config", {}) if saved.get("config")
                                                  and same_objective and k not in optional and k not in s_cfg]
    if lacks:  # an older raptor's (or a bare Trainer's) checkpoint: it cannot be checked to be this run
        raise CheckpointError(f"{Path(state['path']) / STATE}: its run fingerprint lacks {', '.join(lacks[:5])}"
                              f"{' and more' if len(lacks) > 5 else ''}, so it cannot be checked to be the same run "
                              "(written by another raptor version, or damaged); start a new run (or resume it with "
                              "the raptor version that wrote it)")
    diff = fingerprint_differences(saved, now)
    if diff:
        raise ConfigError(f"--resume {checkpoint}: this run differs from the one that wrote the checkpoint: "
                          + "; ".join(diff) + ". Resume with the same settings and data, or start a new run")
