"""The fingerprint that ties a checkpoint to its run, and the comparisons a resumed run makes.

* :func:`fingerprint` / :func:`fingerprint_differences`: what a resumed run must share with the
  run that wrote the checkpoint (config fields and digests of the records), differences named by flag;
* :func:`plan_differences`: the saved and the recomputed plan and public statistics compared,
  floats within a relative tolerance of :data:`PLAN_REL_TOL` (1e-6), the rest exactly;
* :func:`check_resumable`: a :class:`~raptor.errors.ConfigError` listing what differs.

Privacy: the record digests are SHA-256 of the private records; they are kept in the
checkpoint only (as confidential as the data, see :mod:`raptor.training.saving.checkpoint`), never in
results.json.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from raptor._hashing import sha256_file
from raptor.errors import ConfigError
from raptor.training.config import field_flag

#: fingerprint fields of ``--objective generate`` runs only (not in TrainConfig)
GENERATE_FIELDS = frozenset({"freeze_shared_experts"})
#: fields that may differ between a run and its resumption (they change no release)
RESUMABLE_FIELDS = ("eval_every", "output_dir", "performance.micro_batch_size", "performance.eval_batch_size",
                    "performance.device", "performance.memory_budget_mib")



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
        flag = field_flag(key)
        out.append(f"{flag + ' (' + key + ')' if flag else key}: {_shown(key, s_cfg.get(key))} -> "
                   f"{_shown(key, n_cfg.get(key))}")
    for key in ("model", "label_names", "public_source"):
        if saved.get(key) != now.get(key):
            out.append(f"{key}: {saved.get(key)!r} -> {now.get(key)!r}")
    for key, value in now.get("data", {}).items():
        if saved.get("data", {}).get(key) != value:
            out.append(f"{key}: different records (the data file or its size changed)")
    return out


def _shown(key: str, value) -> str:
    """A fingerprinted config value as a difference line shows it (a batch size left to the default
    is fingerprinted as None: the default N/10 of the fingerprinted records)."""
    return "the default (N/10)" if key == "batch_size" and value is None else repr(value)


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
    from raptor.training.saving.checkpoint import STATE, read_state

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
