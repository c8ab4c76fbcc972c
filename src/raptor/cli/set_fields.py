"""Settings from text: the value of a ``--set PATH=VALUE`` item (``privacy.pseudo_count=0.5``,
``optim.betas=0.9,0.95``, ``layers=0,2``, ``performance.memory_budget_mib=none``) converted by the
field's declared type, and the leaf fields of a settings dataclass by dotted path. The flags and
``--set`` themselves are :mod:`raptor.cli.flags`.
"""

from __future__ import annotations

import dataclasses
import types
import typing

_NONE = {"none", "null"}
_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


def leaf_fields(cls: type, prefix: str = "") -> dict[str, tuple[dataclasses.Field, object]]:
    """``{dotted path: (field, declared type)}`` of every leaf field of the dataclass ``cls`` (nested
    dataclasses are walked, not leaves)."""
    hints = typing.get_type_hints(cls)
    out: dict[str, tuple[dataclasses.Field, object]] = {}
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            out.update(leaf_fields(kind, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = (f, kind)
    return out


def _options(kind) -> tuple:
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return typing.get_args(kind)
    return (kind,)


def convert(kind, text: str):
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
    if kind in (int, float) and not t:
        raise ValueError("the value is empty")
    if kind is int:
        try:
            return int(t)
        except ValueError:
            raise ValueError(f"{text!r} is not an integer") from None
    if kind is float:
        try:
            return float(t)
        except ValueError:
            raise ValueError(f"{text!r} is not a number") from None
    if kind is str:
        return text
    if typing.get_origin(kind) is tuple:
        args = typing.get_args(kind)
        parts = [p for p in t.split(",")] if t else []
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(convert(args[0], p) for p in parts)
        if len(parts) != len(args):
            raise ValueError(f"{text!r} needs {len(args)} comma-separated values")
        return tuple(convert(a, p) for a, p in zip(args, parts, strict=True))
    raise ValueError(f"fields of type {kind} are not settable from text")


_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def type_words(kind) -> str:
    """A declared type in words: ``int | None`` -> "an integer, or none"; ``tuple[float, float]`` ->
    "2 comma-separated values"."""
    options = _options(kind)
    words = []
    for option in (o for o in options if o is not type(None)):
        if typing.get_origin(option) is tuple:
            args = typing.get_args(option)
            words.append("comma-separated values" if len(args) == 2 and args[1] is Ellipsis
                         else f"{len(args)} comma-separated values")
        else:
            words.append(_WORDS.get(option, getattr(option, "__name__", str(option))))
    return " or ".join(words) + (", or none" if type(None) in options else "")
