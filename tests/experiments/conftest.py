"""Shared fixtures of the experiments' tests: the scripts under experiments/ load as modules."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


@pytest.fixture()
def experiment_script(monkeypatch):
    """``experiment_script("run_grid")`` -> experiments/run_grid.py as a fresh module, with
    experiments/ on ``sys.path`` (the scripts import their neighbours) and the module registered
    in ``sys.modules`` (its dataclasses look their module up there) until the test ends."""

    def load(name: str):
        monkeypatch.syspath_prepend(str(EXPERIMENTS))
        mod_name = f"{name}_under_test"
        spec = importlib.util.spec_from_file_location(mod_name, EXPERIMENTS / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, mod_name, mod)
        spec.loader.exec_module(mod)
        return mod

    return load
