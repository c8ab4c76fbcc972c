"""``raptor train --set section.field=VALUE``: any field of the run's :class:`TrainConfig`, by its
dotted path (``privacy.pseudo_count=0.5``, ``optim.betas=0.9,0.95``, ``layers=0,2``,
``privacy.schedule.alternate=1,2``, ``performance.memory_budget_mib=none``), its text converted by
the field's declared type and the config rebuilt (and validated) by
:func:`raptor.training.config.replace_fields`. Flags are the common settings; ``--set`` reaches
every other field (a field with its own flag is refused with the flag's name: one way to set each).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Sequence

from raptor.errors import ConfigError
from raptor.training.config import FIELD_FLAGS, TrainConfig, replace_fields

#: fields a first-class flag sets: ``--set`` refers to the flag (one way to set each field, and the
#: CLI's other reads of the flag stay consistent with the config)
FLAGGED: dict[str, str] = {**FIELD_FLAGS, "output_dir": "--output-dir", "freeze_head": "--freeze-head",
                           "performance.dtype": "--dtype", "privacy.shared_split": "--shared-split"}

_NONE = {"none", "null"}
_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


def leaf_paths(cls: type = TrainConfig, prefix: str = "") -> dict[str, object]:
    """``{dotted path: declared type}`` of every leaf field of the config dataclass ``cls``."""
    hints = typing.get_type_hints(cls)
    out: dict[str, object] = {}
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            out.update(leaf_paths(kind, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = kind
    return out


def _options(kind) -> tuple:
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return typing.get_args(kind)
    return (kind,)


def _convert(kind, text: str):
    """``text`` as a value of the declared type ``kind`` (raises ValueError when it is none of them)."""
    options = _options(kind)
    if type(None) in options and text.strip().lower() in _NONE:
        return None
    errors = []
    for option in (o for o in options if o is not type(None)):
        try:
            return _one(option, text)
        except ValueError as err:
            errors.append(str(err))
    raise ValueError("; ".join(errors))


def _one(kind, text: str):
    t = text.strip()
    if kind is bool:
        if t.lower() in _TRUE:
            return True
        if t.lower() in _FALSE:
            return False
        raise ValueError(f"{text!r} is not true or false")
    if kind is int:
        return int(t)
    if kind is float:
        return float(t)
    if kind is str:
        return text
    if typing.get_origin(kind) is tuple:
        args = typing.get_args(kind)
        parts = [p for p in t.split(",")] if t else []
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], p) for p in parts)
        if len(parts) != len(args):
            raise ValueError(f"{text!r} needs {len(args)} comma-separated values")
        return tuple(_convert(a, p) for a, p in zip(args, parts, strict=True))
    raise ValueError(f"fields of type {kind} are not settable from text")


def parse_sets(items: Sequence[str] | None, cls: type = TrainConfig) -> dict[str, object]:
    """``{dotted path: value}`` of ``--set`` items ``PATH=VALUE``, each checked against the fields of
    ``cls`` (the run's :class:`TrainConfig`)."""
    paths = leaf_paths(cls)
    out: dict[str, object] = {}
    for item in items or ():
        path, eq, text = item.partition("=")
        path = path.strip()
        if not eq or not path:
            raise ConfigError(f"--set {item!r}: expected FIELD=VALUE, e.g. --set privacy.pseudo_count=0.5")
        if path not in paths:
            near = [p for p in paths if p.rsplit(".", 1)[-1] == path.rsplit(".", 1)[-1]]
            hint = f" (did you mean {', '.join(near)}?)" if near else ""
            raise ConfigError(f"--set {path}: no such config field{hint}; the fields: {', '.join(sorted(paths))}")
        if path in FLAGGED:
            raise ConfigError(f"--set {path}: this field has its own flag; use {FLAGGED[path]}")
        try:
            out[path] = _convert(paths[path], text)
        except ValueError as err:
            raise ConfigError(f"--set {path}={text}: not a value of its type {paths[path]} ({err})") from None
    return out


def apply_sets(config: TrainConfig, items: Sequence[str] | None) -> TrainConfig:
    """``config`` with the ``--set`` items applied (validated by the configs themselves)."""
    sets = parse_sets(items)
    return replace_fields(config, sets) if sets else config
