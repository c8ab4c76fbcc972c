"""Ghost norms and book-keeping sums against explicit per-record gradients (fast path vs slow)."""

from __future__ import annotations

import torch

from raptor.per_sample.capture import Use
from raptor.per_sample.norms import clipped_sum, ghost_sq_norm, materialise, sq_norms, weighted_sum


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
