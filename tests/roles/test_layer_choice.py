"""The layer-choice rule: highest public routing entropy, ties to the later layer, public inputs only."""

from __future__ import annotations

import inspect

import pytest
import torch

from raptor.errors import ConfigError
from raptor.roles import layer_choice as lc
from raptor.roles.public_stats import layer_stats


def _owners(shares, n=400):
    counts = [round(s * n) for s in shares]
    return torch.cat([torch.full((c,), e) for e, c in enumerate(counts)])


def test_highest_entropy_layer_is_chosen():
    owners = {0: _owners([0.7, 0.1, 0.1, 0.1]), 1: _owners([0.25] * 4), 2: _owners([0.4, 0.4, 0.1, 0.1])}
    choice = lc.choose_from_owners(owners, 4)
    assert choice.chosen == (1,)
    assert [s.layer for s in choice.table] == [0, 1, 2]
    two = lc.choose_from_owners(owners, 4, count=2)
    assert two.chosen == (1, 2)


def test_ties_go_to_the_later_layer():
    same = _owners([0.5, 0.5, 0.0, 0.0])
    perm = _owners([0.0, 0.0, 0.5, 0.5])  # same entropy, different experts
    choice = lc.choose_from_owners({0: same, 3: perm, 1: same}, 4)
    assert choice.chosen == (3,)
    table = [layer_stats(0, _owners([0.5, 0.49, 0.01, 0.0]), 4), layer_stats(1, same, 4)]
    assert table[0].entropy > table[1].entropy
    assert lc.choose_layers(table, tie_tol=1.0) == (1,)       # within tolerance: the later layer wins
    assert lc.choose_layers(table, tie_tol=0.0) == (0,)       # strictly higher entropy wins


def test_report_and_errors():
    choice = lc.choose_from_owners({0: _owners([0.5, 0.5]), 1: _owners([0.9, 0.1])}, 2)
    text = choice.format_table()
    assert "recommended layer(s): 0" in text and "0*" in text
    d = choice.to_dict()
    assert d["chosen"] == [0] and len(d["layers"]) == 2
    with pytest.raises(ConfigError, match="count"):
        lc.choose_layers(choice.table, count=3)
    with pytest.raises(ConfigError, match="no MoE layers"):
        lc.choose_layers([])


def test_rule_takes_only_public_inputs():
    # The rule's inputs are public owner assignments/statistics; it has no parameter through which
    # private data, a model on private data, or a ledger could enter, and it spends no budget.
    params = set(inspect.signature(lc.choose_from_owners).parameters)
    assert params == {"public_owners", "num_experts", "count", "tie_tol", "stats_kwargs"}
    assert set(inspect.signature(lc.choose_layers).parameters) == {"table", "count", "tie_tol"}
    src = inspect.getsource(lc)
    for forbidden in ("ledger", "private", "record("):
        assert forbidden not in src.split('"""', 2)[2].replace("Privacy:", ""), forbidden
