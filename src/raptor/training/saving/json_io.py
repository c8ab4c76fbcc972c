"""Strict JSON files for results: non-finite floats (the epsilon of a non-private run, infinite clip
norms) are written as the strings "inf"/"nan", NumPy scalars as Python numbers, tensors and arrays
as lists, paths as strings. ``allow_nan=False`` makes any other non-finite value an error."""

from __future__ import annotations

import json
import math
from pathlib import Path


def strict(obj):
    """``obj`` with non-finite floats as strings and NumPy scalars as Python numbers (recursively)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    if type(obj).__module__ == "numpy" and hasattr(obj, "item") and getattr(obj, "ndim", None) == 0:
        return strict(obj.item())
    return obj


def _default(obj):
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):  # torch.Tensor, numpy.ndarray
        return strict(obj.tolist())
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def write_strict_json(path: str | Path, payload) -> Path:
    """Write ``payload`` to ``path`` as indented strict JSON (parent directories created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(strict(payload), indent=2, default=_default, allow_nan=False) + "\n")
    return path
