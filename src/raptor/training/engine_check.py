"""``raptor check``'s library entry: the per-record engine against the one-record-at-a-time
reference on a family's tiny model (:mod:`raptor.per_sample.check` does the work).

The CLI reaches the engine only through :mod:`raptor.training` (the layering rule of
``tests/test_package.py``); this module is that door for the check, and adds nothing to it.
"""

from __future__ import annotations

from raptor.per_sample.check import BF16_TOLERANCE, CheckReport, check_family

__all__ = ["BF16_TOLERANCE", "CheckReport", "check_family"]
