"""Choice lists the CLI offers, importable without torch (``raptor <command> --help`` starts fast).

The CLI reaches the library's registries through :mod:`raptor.training` (DESIGN.md section 2);
a registry that lives in a torch-importing module is copied here, and ``tests/test_registries.py``
fails when a copy and its source disagree.
"""

from __future__ import annotations

from raptor.evaluation.metrics import METRICS

#: precisions of ``raptor check``'s tiny model; the source is :data:`raptor.audit.engine_check.CHECK_DTYPES`
CHECK_DTYPES: tuple[str, ...] = ("float64", "float32", "bfloat16")

__all__ = ["CHECK_DTYPES", "METRICS"]
