"""One source per registry: every hand-written list of families or methods equals the table it names."""

from __future__ import annotations

import argparse

from raptor.moe.adapters import get_adapter, supported_model_types
from raptor.moe.models import FAMILIES
from raptor.moe.names import FAMILY_NAMES
from raptor.training.config import METHODS
from raptor.training.methods import METHOD_SPECS


def test_family_names_equal_the_adapter_table_s_classifier_families():
    # moe/names.py is the torch-free copy for fast CLI start-up; the adapter table is the source
    assert FAMILY_NAMES == FAMILIES
    assert FAMILIES == tuple(t for t in supported_model_types() if get_adapter(t).head_class is not None)


def test_methods_are_the_method_table_s_keys_and_the_cli_offers_exactly_them():
    from raptor.cli.train import add_arguments

    assert METHODS == tuple(METHOD_SPECS)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    choices = next(a.choices for a in parser._actions if a.dest == "method")
    assert tuple(choices) == METHODS


def test_pretraining_asks_the_adapter_for_its_objective_and_top_k():
    from raptor.pretrain.lm import CAUSAL_FAMILIES, MLM_FAMILIES
    from raptor.pretrain.run import PretrainConfig

    assert set(MLM_FAMILIES) | set(CAUSAL_FAMILIES) == set(FAMILIES)
    assert all(get_adapter(f).pretrain_objective == "mlm" for f in MLM_FAMILIES)
    for family in FAMILIES:
        want = 1 if get_adapter(family).top1 else 2
        assert PretrainConfig(output_dir="x", text=("a.txt",), family=family, top_k=2).effective_top_k == want
