"""Ghost norms and book-keeping sums against explicit per-record gradients (fast path vs slow)."""

from __future__ import annotations

import torch

from raptor.per_sample.capture import Use
from raptor.per_sample.norms import (
    clipped_sum,
    ghost_sq_norm,
    grouped_clipped_sums,
    grouped_materialise,
    grouped_sq_norms,
    materialise,
    sq_norms,
    weighted_sum,
)


def _explicit(a, g, rec, B):
    return torch.stack([g[rec == r].T @ a[rec == r] for r in range(B)])


def test_ghost_equals_explicit_for_index_and_uniform_layouts():
    gen = torch.Generator().manual_seed(0)
    B = 4
    rec = torch.tensor([0, 0, 0, 2, 2, 3])  # record 1 has no rows
    a = torch.randn(6, 5, generator=gen, dtype=torch.float64)
    g = torch.randn(6, 3, generator=gen, dtype=torch.float64)
    use = Use(name="w", slot=None, kind="linear", group=0, a=a, rec=rec, g=g)
    per = _explicit(a, g, rec, B)
    torch.testing.assert_close(ghost_sq_norm(use, B), per.flatten(1).pow(2).sum(1))
    torch.testing.assert_close(materialise(use, B, (3, 5)), per)
    torch.testing.assert_close(sq_norms(per), per.flatten(1).pow(2).sum(1))
    c = torch.tensor([0.5, 1.0, 0.0, 2.0], dtype=torch.float64)
    expected = (c[:, None, None] * per).sum(0)
    torch.testing.assert_close(clipped_sum(use, c, B, (3, 5)), expected)
    torch.testing.assert_close(weighted_sum(per, c), expected)
    uniform = Use(name="w", slot=None, kind="linear", group=0, a=a, rows_per_record=2, g=g)
    per_u = _explicit(a, g, torch.arange(3).repeat_interleave(2), 3)
    torch.testing.assert_close(ghost_sq_norm(uniform, 3), per_u.flatten(1).pow(2).sum(1))


def test_embedding_ghost_counts_repeated_ids():
    gen = torch.Generator().manual_seed(1)
    ids = torch.tensor([3, 1, 3, 0, 0, 2])
    g = torch.randn(6, 4, generator=gen, dtype=torch.float64)
    use = Use(name="e", slot=None, kind="embedding", group=0, a=ids, rows_per_record=3, g=g)
    per = materialise(use, 2, (5, 4))
    explicit = torch.zeros(2, 5, 4, dtype=torch.float64)
    for t in range(6):
        explicit[t // 3, ids[t]] += g[t]
    torch.testing.assert_close(per, explicit)
    torch.testing.assert_close(ghost_sq_norm(use, 2), explicit.flatten(1).pow(2).sum(1))


def test_zero_factor_rows_are_excluded_not_multiplied():
    a = torch.ones(4, 2, dtype=torch.float64)
    g = torch.ones(4, 2, dtype=torch.float64)
    g[2:] = float("nan")  # record 1 is non-finite; its factor is 0
    use = Use(name="w", slot=None, kind="linear", group=0, a=a, rows_per_record=2, g=g)
    out = clipped_sum(use, torch.tensor([1.0, 0.0], dtype=torch.float64), 2, (2, 2))
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.full((2, 2), 2.0, dtype=torch.float64))


def _grouped_use(gen, B, E, d_in, d_out, rows_per_pair):
    """A grouped use whose (expert, record) pairs have the given numbers of rows (sorted by expert, record)."""
    expert, rec = [], []
    for (e, r), m in sorted(rows_per_pair.items()):
        expert += [e] * m
        rec += [r] * m
    n = len(rec)
    a = torch.randn(n, d_in, generator=gen, dtype=torch.float64)
    g = torch.randn(n, d_out, generator=gen, dtype=torch.float64)
    use = Use(name="w", slot=None, kind="grouped", group=-1, a=a, rec=torch.tensor(rec), g=g,
              expert=torch.tensor(expert), slot_groups=torch.arange(1, E + 1))
    return use


def test_grouped_norms_and_sums_match_explicit_in_both_modes():
    gen = torch.Generator().manual_seed(2)
    B, E, d_in, d_out = 5, 3, 4, 6
    rows = {(0, 0): 3, (0, 3): 1, (1, 1): 7, (1, 3): 2, (2, 4): 5}  # record 2 has no rows; pairs of unequal size
    use = _grouped_use(gen, B, E, d_in, d_out, rows)
    c_GB = torch.rand(E + 1, B, generator=gen, dtype=torch.float64)
    c_GB[2, 3] = 0.0  # a zero factor is selected away
    explicit = {}
    for e, r in rows:
        sel = (use.expert == e) & (use.rec == r)
        explicit[(e, r)] = use.g[sel].T @ use.a[sel]
    want_sums = {e: sum(c_GB[1 + e, r] * per for (ee, r), per in explicit.items() if ee == e) for e in range(E)}
    for mode in ("ghost", "materialise"):
        gn = grouped_sq_norms(use, B, mode=mode)
        assert (gn.per_pair is None) == (mode == "ghost")
        got = {(int(e), int(r)): float(v) for e, r, v in zip(gn.pair_expert, gn.pair_rec, gn.sq, strict=True)}
        assert got.keys() == explicit.keys()
        for k, per in explicit.items():
            assert abs(got[k] - float(per.pow(2).sum())) < 1e-10, (mode, k)
        torch.testing.assert_close(gn.pair_group, 1 + gn.pair_expert)
        sums = grouped_clipped_sums(use, gn, c_GB, E)
        assert sums.shape == (E, d_out, d_in)
        for e, want in want_sums.items():
            torch.testing.assert_close(sums[e], want)


def test_grouped_mode_choice_by_shape():
    # few rows per pair: the ghost Gram products are cheap
    assert not grouped_materialise([4] * 16, 256, 256)
    # many rows per pair: materialise (per-pair gradients no larger than twice the rows)
    assert grouped_materialise([120] * 16, 256, 256)
    # many pairs of few rows and one long one: per-pair gradients would be far larger than the rows
    assert not grouped_materialise([128] + [2] * 200, 256, 256)
