"""Per-record squared norms and clipped sums of captured uses (ghost or materialised).

For a linear use with per-record rows ``A_r`` (m x d_in) and ``G_r`` (m x d_out) the per-record
gradient is ``G_r^T A_r`` and

    ||G_r^T A_r||_F^2 = sum_{t,s in r} (g_t . g_s) (a_t . a_s)          (ghost identity)

which costs ``m^2 (d_in + d_out)`` per record instead of ``m d_in d_out`` (and no ``d_in x d_out``
buffer per record). :func:`keep_rows` picks, per use, whichever of the rows or the per-record
gradients is smaller to keep until the clip factors are known (rows -> ghost norm). Embeddings use
``sum_{t,s} [id_t = id_s] (g_t . g_s)``. Biases, norm scales and tables are materialised per
record (they are small). Several uses of one parameter (tied weights) are materialised and summed
before squaring, because ghost norms are not additive across uses.

The clipped sum of a use is ``sum_t c[rec_t] g_t a_t^T = (c[rec] * G)^T A`` (book-keeping). Rows
of a record with ``c = 0`` are *selected away* (``torch.where``), never multiplied, so a
non-finite record contributes exactly zero.

Legend: B records, R records present in a use, m rows per record (padded), n rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
    return pad_by_key(x, use.rec)


def pad_by_key(x: torch.Tensor, rec: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``x [n, d]`` with a sorted block key ``rec [n]`` as ``[R, m, d]`` and the key of each block."""
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


def keep_rows(use: Use, num_records: int) -> bool:
    """Keep the rows (ghost norm now, ``(c G)^T A`` later) rather than per-record gradients?

    Chooses the smaller of what must be kept until the clip factors are known: the rows,
    ``n (d_in + d_out)`` numbers, or the per-record gradients, ``R d_in d_out`` (R records present).
    Embeddings always keep rows (a per-record ``V x D`` gradient is never small).
    """
    if use.kind == "embedding":
        return True
    n = use.a.shape[0]
    if use.rec is None:
        r = num_records
    else:
        r = max(int(torch.unique_consecutive(use.rec).numel()), 1)
    d_in, d_out = use.a.shape[1], use.g.shape[1]
    return n * (d_in + d_out) < r * d_in * d_out


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
    # <GG^T, AA^T>_F per record as a batched dot product (no m x m product buffer)
    sq = torch.einsum("rij,rij->r", gg, aa) if gg.shape[0] else gg.new_zeros(0)
    return _scatter_records(sq, ids, num_records)


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
    """``sum_r c_r grad_r`` of one use (rows of records with ``c_r = 0`` are excluded, not multiplied)."""
    g = use.g
    rec = record_index(use, num_records, g.device)
    c_rows = c_B.to(g.dtype).index_select(0, rec)
    a = use.a
    ok = c_rows > 0
    if not bool(ok.all()):
        keep = torch.nonzero(ok, as_tuple=False).squeeze(1)
        g, a, c_rows = g.index_select(0, keep), a.index_select(0, keep), c_rows.index_select(0, keep)
    all_one = bool((c_rows == 1).all())
    if use.kind == "linear":
        a = a.to(g.dtype)
        if not all_one:  # scale the narrower side
            if a.shape[1] < g.shape[1]:
                a = a * c_rows[:, None]
            else:
                g = g * c_rows[:, None]
        return g.transpose(0, 1).matmul(a)
    if use.kind == "embedding":
        return g.new_zeros(shape).index_add_(0, a, g if all_one else g * c_rows[:, None])
    raise AssertionError(use.kind)


def weighted_sum(per_record: torch.Tensor, c_B: torch.Tensor) -> torch.Tensor:
    """``sum_r c_r per_record[r]`` with records of ``c_r = 0`` excluded (selected away, not multiplied)."""
    c = c_B.to(per_record.dtype)
    ok = c > 0
    if not bool(ok.all()):
        keep = torch.nonzero(ok, as_tuple=False).squeeze(1)
        per_record, c = per_record.index_select(0, keep), c.index_select(0, keep)
    flat = per_record.reshape(per_record.shape[0], math.prod(per_record.shape[1:]))  # -1 is ambiguous at 0 rows
    return torch.mv(flat.transpose(0, 1), c).reshape(per_record.shape[1:])


def sq_norms(per_record: torch.Tensor) -> torch.Tensor:
    """``||per_record[r]||^2`` for every record."""
    if per_record.shape[0] == 0:
        return per_record.new_zeros(0)
    return torch.linalg.vector_norm(per_record.reshape(per_record.shape[0], -1), dim=1).square()


# ---------------------------------------------------------------------------- grouped (fused) experts
@dataclass
class GroupedNorms:
    """Per-(expert, record) squared norms of a grouped fused-expert use."""

    pair_group: torch.Tensor  # [P] group index of each (expert, record) pair
    pair_rec: torch.Tensor  # [P]
    sq: torch.Tensor  # [P]
    per_pair: torch.Tensor | None  # [P, d_out, d_in] when materialised
    pair_expert: torch.Tensor  # [P]


def grouped_sq_norms(use: Use, num_records: int, mode: str | None = None) -> GroupedNorms:
    """Squared norms of ``G_{e,r}^T A_{e,r}`` for every (expert e, record r) pair of a grouped use.

    Rows are sorted by (expert, record), so ``key = e * B + r`` is sorted and each pair's rows are
    one contiguous block. ``mode``: ``"ghost"`` (rows kept; one padded batched Gram product over
    every pair of the layer), ``"materialise"`` (the per-pair gradients, one ``mm`` per pair on its
    own rows, no padding; rows dropped) or None: chosen by :func:`grouped_materialise`.
    """
    B = max(num_records, 1)
    key = use.expert * B + use.rec
    g = use.g
    a = use.a.to(g.dtype)
    d_in, d_out = a.shape[1], g.shape[1]
    if key.numel() == 0:
        ids, sq, per = key, g.new_zeros(0), None
    else:
        ids, counts = torch.unique_consecutive(key, return_counts=True)
        sizes = counts.tolist()
        if mode is None:
            mode = "materialise" if grouped_materialise(sizes, d_in, d_out) else "ghost"
        if mode == "materialise":
            per = g.new_empty((len(sizes), d_out, d_in))
            start = 0
            for p, m in enumerate(sizes):
                torch.mm(g[start:start + m].t(), a[start:start + m], out=per[p])
                start += m
            sq = sq_norms(per)
        elif mode == "ghost":
            gp, _ = pad_by_key(g, key)
            ap, _ = pad_by_key(a, key)
            sq = torch.einsum("rij,rij->r", torch.bmm(gp, gp.transpose(1, 2)), torch.bmm(ap, ap.transpose(1, 2)))
            per = None
        else:
            raise ValueError(f"mode must be 'ghost', 'materialise' or None, got {mode!r}")
    pair_expert = ids // B
    return GroupedNorms(pair_group=use.slot_groups.to(ids.device).index_select(0, pair_expert),
                        pair_rec=ids % B, sq=sq, per_pair=per, pair_expert=pair_expert)


def grouped_materialise(sizes: list[int], d_in: int, d_out: int) -> bool:
    """Materialise a grouped use's per-pair gradients (rather than keep its rows for a ghost norm)?

    Time: the ghost norm's Gram products cost ``P m_max^2 (d_in + d_out)`` (padded to the largest
    pair, m_max rows) on top of the book-keeping sum ``n d_in d_out`` it still needs later, while
    materialising costs ``n d_in d_out`` plus a few passes over ``P d_in d_out`` numbers (norm,
    weighted sum), about 8 Gram flops each (measured on CPU, d = 256). Memory: the per-pair
    gradients may take at most twice the rows' ``n (d_in + d_out)`` numbers.
    """
    P, n, m_max = len(sizes), sum(sizes), max(sizes)
    faster = m_max * m_max * (d_in + d_out) > 8 * d_in * d_out
    small_enough = P * d_in * d_out <= 2 * n * (d_in + d_out)
    return faster and small_enough


def grouped_clipped_sums(use: Use, norms: GroupedNorms, c_GB: torch.Tensor, num_slots: int) -> dict[int, torch.Tensor]:
    """``{e: sum_r c[group_e, r] G_{e,r}^T A_{e,r}}`` for every expert slot with rows."""
    out: dict[int, torch.Tensor] = {}
    g = use.g
    if norms.per_pair is not None:
        c_P = c_GB[norms.pair_group, norms.pair_rec]
        for e in torch.unique(norms.pair_expert).tolist():
            sel = torch.nonzero(norms.pair_expert == e, as_tuple=False).squeeze(1)
            out[e] = weighted_sum(norms.per_pair.index_select(0, sel), c_P.index_select(0, sel))
        return out
    c_rows = c_GB.to(g.dtype)[use.slot_groups.to(g.device).index_select(0, use.expert), use.rec]
    a = use.a.to(g.dtype)
    ok = c_rows > 0
    if not bool(ok.all()):
        keep = torch.nonzero(ok, as_tuple=False).squeeze(1)
        g, a, c_rows = g.index_select(0, keep), a.index_select(0, keep), c_rows.index_select(0, keep)
        expert = use.expert.index_select(0, keep)
    else:
        expert = use.expert
    counts = torch.bincount(expert, minlength=num_slots).tolist()
    if a.shape[1] < g.shape[1]:
        a = a * c_rows[:, None]
    else:
        g = g * c_rows[:, None]
    start = 0
    for e, n in enumerate(counts):
        if n:
            out[e] = g[start:start + n].transpose(0, 1).matmul(a[start:start + n])
        start += n
    return out


def sum_dtype(param: torch.Tensor) -> torch.dtype:
    """The dtype clipped sums and released gradients of ``param`` are kept in: float32 for
    bf16/fp16 parameters (a low-precision sum loses small per-record contributions and rounds the
    noise), else the parameter's own."""
    return torch.float32 if param.dtype in (torch.bfloat16, torch.float16) else param.dtype
