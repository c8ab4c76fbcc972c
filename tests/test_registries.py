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


def _choices(module_name: str, dest: str, *subcommand: str) -> tuple:
    """The ``choices`` of ``dest`` in the parser of ``raptor.cli.<module_name>`` (or of its sub-parser)."""
    import importlib

    parser = argparse.ArgumentParser()
    importlib.import_module(f"raptor.cli.{module_name}").add_arguments(parser)
    for name in subcommand:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return tuple(next(a.choices for a in parser._actions if a.dest == dest))


def _set_choices(path: str) -> tuple:
    """The choices ``raptor train --set PATH=`` accepts (the field's metadata)."""
    from raptor.cli.flags import schema

    choices = schema()[path].metadata["cli"]["choices"]
    return tuple(choices() if callable(choices) else choices)


def _cli_choice_lists() -> list[tuple[tuple, tuple]]:
    """(registry, the CLI's choices) for every choice list the CLI offers from a library registry."""
    from raptor.accounting.events import ACCOUNTANTS, ADJACENCIES
    from raptor.audit.engine_check import CHECK_DTYPES
    from raptor.audit.mechanism import GENERATORS, STREAMS, VARIANTS
    from raptor.evaluation.metrics import METRICS
    from raptor.training.config import DTYPES, OPTIMIZERS

    return [
        (ACCOUNTANTS, _choices("plan", "accountant")),
        (ACCOUNTANTS, _choices("account", "accountant")),
        (ACCOUNTANTS, _set_choices("privacy.accountant")),
        (ADJACENCIES, _choices("plan", "adjacency")),
        (ADJACENCIES, _choices("account", "adjacency")),
        (ADJACENCIES, _set_choices("privacy.adjacency")),
        (METRICS, _set_choices("run.metric")),
        (OPTIMIZERS, _set_choices("optim.name")),
        (OPTIMIZERS, _choices("demo", "optimizer")),
        (DTYPES, _set_choices("performance.dtype")),
        (CHECK_DTYPES, _choices("check", "dtype")),
        (FAMILIES, _choices("check", "family")),
        (FAMILIES, _choices("bench", "families")),
        (METHODS, _choices("demo", "methods")),
        (VARIANTS, _choices("audit", "variant", "mechanism")),
        (STREAMS, _choices("audit", "streams", "mechanism")),
        (GENERATORS, _choices("audit", "generator", "mechanism")),
    ]


def test_the_cli_offers_every_entry_of_each_registry_it_chooses_from():
    # a registry that gains an entry the CLI does not offer fails here (issue 34 item 3)
    for registry, offered in _cli_choice_lists():
        assert offered == tuple(registry), f"the CLI offers {offered}, the registry holds {tuple(registry)}"


def test_torch_free_copies_equal_their_sources():
    # the copies in torch-free modules (for fast --help) of registries that live in torch-importing modules
    from raptor.audit.engine_check import CHECK_DTYPES
    from raptor.pretrain.names import DEFAULT_GLUE_TASKS
    from raptor.pretrain.run import DEFAULT_GLUE_TASKS as PRETRAIN_GLUE_TASKS
    from raptor.training import names

    assert names.CHECK_DTYPES == CHECK_DTYPES
    from raptor.cli.upcycle import ROUTERS
    from raptor.pretrain.upcycle import ROUTER_INITS

    assert ROUTERS == ROUTER_INITS
    assert DEFAULT_GLUE_TASKS == PRETRAIN_GLUE_TASKS
