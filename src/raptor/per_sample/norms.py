"""Per-record squared norms and clipped sums of captured uses (ghost or materialised).

For a linear use with per-record rows ``A_r`` (m x d_in) and ``G_r`` (m x d_out) the per-record
gradient is ``G_r^T A_r`` and

    ||G_r^T A_r||_F^2 = sum_{t,s in r} (g_t . g_s) (a_t . a_s)          (ghost identity)

which costs ``m^2 (d_in + d_out)`` per record instead of ``m d_in d_out`` (and no ``d_in x d_out``
buffer per record). :func:`prefer_ghost` picks the cheaper per use. Embeddings use
``sum_{t,s} [id_t = id_s] (g_t . g_s)``. Biases, norm scales and tables are materialised per
record (they are small). Several uses of one parameter (tied weights) are materialised and summed
before squaring, because ghost norms are not additive across uses.

The clipped sum of a use is ``sum_t c[rec_t] g_t a_t^T = (c[rec] * G)^T A`` (book-keeping). Rows
of a record with ``c = 0`` are *selected away* (``torch.where``), never multiplied, so a
non-finite record contributes exactly zero.

Legend: B records, R records present in a use, m rows per record (padded), n rows.
"""

from __future__ import annotations

import torch

from raptor.per_sample.capture import Use


def record_index(use: Use, num_records: int, device) -> torch.Tensor:
    """Row -> record index ``[n]`` of a use."""
    if use.rec is not None:
        return use.rec
    m = use.rows_per_record or 0
    return torch.arange(num_records, device=device).repeat_interleave(m)


def padded(use: Use, x: torch.Tensor, num_records: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rows ``x [n, d]`` of ``use`` as ``[R, m, d]`` and the record id of each of the R blocks.

    Uniform layouts are a free view (R = B, ids None = arange(B)); index layouts are packed per
    record present (rows are sorted by record).
    """
    if use.rec is None:
        return x.reshape(num_records, use.rows_per_record or 0, *x.shape[1:]), None
    rec = use.rec
    if rec.numel() == 0:
        return x.new_zeros((0, 0) + tuple(x.shape[1:])), rec
    ids, inverse, counts = torch.unique_consecutive(rec, return_inverse=True, return_counts=True)
    m = int(counts.max())
    starts = torch.cumsum(counts, 0) - counts
    pos = torch.arange(rec.numel(), device=rec.device) - starts.index_select(0, inverse)
    out = x.new_zeros((ids.numel(), m) + tuple(x.shape[1:]))
    out[inverse, pos] = x
    return out, ids


def _scatter_records(values_R: torch.Tensor, ids: torch.Tensor | None, num_records: int) -> torch.Tensor:
    if ids is None:
        return values_R
    out = values_R.new_zeros((num_records,) + tuple(values_R.shape[1:]))
    out[ids] = values_R
    return out


def prefer_ghost(use: Use, num_records: int) -> bool:
    """Ghost norm when ``m^2 (d_in + d_out) < m d_in d_out``, i.e. ``m (d_in + d_out) < d_in d_out``."""
    if use.kind == "embedding":
        return True
    n = use.a.shape[0]
    if use.rec is None:
        m = use.rows_per_record or 0
    else:
        r = max(int(torch.unique_consecutive(use.rec).numel()), 1)
        m = max(n // r, 1)
    d_in, d_out = use.a.shape[1], use.g.shape[1]
    return m * (d_in + d_out) < d_in * d_out


def ghost_sq_norm(use: Use, num_records: int) -> torch.Tensor:
    """``||per-record gradient||^2`` of a single linear or embedding use, without materialising it."""
    g, ids = padded(use, use.g, num_records)
    gg = torch.bmm(g, g.transpose(1, 2))
    if use.kind == "embedding":
        tok, _ = padded(use, use.a, num_records)
        aa = (tok[:, :, None] == tok[:, None, :]).to(gg.dtype)
    else:
        a, _ = padded(use, use.a.to(g.dtype), num_records)
        aa = torch.bmm(a, a.transpose(1, 2))
    return _scatter_records((gg * aa).sum(dim=(1, 2)), ids, num_records)


def materialise(use: Use, num_records: int, shape: tuple[int, ...]) -> torch.Tensor:
    """The per-record gradients ``[B, *shape]`` of one use."""
    B = num_records
    if use.kind == "table":
        return use.per_record
    g = use.g
    if use.kind == "linear":
        gp, ids = padded(use, g, B)
        ap, _ = padded(use, use.a.to(g.dtype), B)
        return _scatter_records(torch.bmm(gp.transpose(1, 2), ap), ids, B)
    rec = record_index(use, B, g.device)
    if use.kind == "bias":
        return g.new_zeros((B,) + shape).index_add_(0, rec, g)
    if use.kind == "scale":
        return g.new_zeros((B,) + shape).index_add_(0, rec, g * use.a.to(g.dtype))
    if use.kind == "embedding":
        out = g.new_zeros((B,) + shape)
        out.index_put_((rec, use.a), g, accumulate=True)
        return out
    raise AssertionError(use.kind)


def clipped_sum(use: Use, c_B: torch.Tensor, num_records: int, shape: tuple[int, ...]) -> torch.Tensor:
    """``sum_r c_r grad_r`` of one use (rows of records with ``c_r = 0`` are excluded)."""
    g = use.g
    rec = record_index(use, num_records, g.device)
    c_rows = c_B.to(g.dtype).index_select(0, rec)
    ok = (c_rows > 0)[:, None]
    gc = torch.where(ok, g * c_rows[:, None], torch.zeros_like(g))
    if use.kind == "linear":
        a = torch.where(ok, use.a.to(g.dtype), torch.zeros((), dtype=g.dtype, device=g.device))
        return gc.transpose(0, 1).matmul(a)
    if use.kind == "embedding":
        return g.new_zeros(shape).index_add_(0, use.a, gc)
    raise AssertionError(use.kind)


def weighted_sum(per_record: torch.Tensor, c_B: torch.Tensor) -> torch.Tensor:
    """``sum_r c_r per_record[r]`` with records of ``c_r = 0`` excluded (not multiplied)."""
    c = c_B.to(per_record.dtype)
    ok = c > 0
    view = (-1,) + (1,) * (per_record.dim() - 1)
    scaled = torch.where(ok.view(view), per_record * c.view(view), torch.zeros((), dtype=per_record.dtype,
                                                                               device=per_record.device))
    return scaled.sum(dim=0)
