"""Fixtures of the per-record engine tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def inf_clip():
    def make(engine):
        return {k: float("inf") for k in engine.group_keys}

    return make
