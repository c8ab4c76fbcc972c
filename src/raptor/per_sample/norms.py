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

from raptor.per_sample.capture import Offsets, Use, grouped_outer

_ZEROS: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


def _zero(x: torch.Tensor) -> torch.Tensor:
    """A 0-dim zero of ``x``'s dtype and device, made once per process: the ``torch.where`` operand
    that selects rows away, without one fill kernel per use (a Python ``0.0`` or ``new_zeros(())``
    makes a fresh device scalar on every call)."""
    key = (x.dtype, x.device)
    zero = _ZEROS.get(key)
    if zero is None:
        with torch.inference_mode(False), torch.no_grad():
            zero = _ZEROS[key] = torch.zeros((), dtype=x.dtype, device=x.device)
    return zero


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


def pad_by_key(x: torch.Tensor, rec: torch.Tensor, cache: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``x [n, d]`` with a sorted block key ``rec [n]`` as ``[R, m, d]`` and the key of each block.

    ``cache``: a dict shared by the uses of one row layout (see :attr:`Use.shared`): the padding
    index is computed once per layout, not once per use."""
    if rec.numel() == 0:
        return x.new_zeros((0, 0) + tuple(x.shape[1:])), rec
    index = None if cache is None else cache.get("pad_index")
    if index is None or index[0] is not rec:
        ids, inverse, counts = torch.unique_consecutive(rec, return_inverse=True, return_counts=True)
        m = int(counts.max())
        starts = torch.cumsum(counts, 0) - counts
        pos = torch.arange(rec.numel(), device=rec.device) - starts.index_select(0, inverse)
        index = (rec, ids, inverse, pos, m)
        if cache is not None:
            cache["pad_index"] = index
    _, ids, inverse, pos, m = index
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
    if use.kind in ("bias", "scale") and use.rec is None:  # uniform layout: a sum over each record's rows
        rows = g if use.kind == "bias" else g * use.a.to(g.dtype)
        return rows.reshape((B, use.rows_per_record or 0) + shape).sum(1)
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


def _row_factors(use: Use, c_B: torch.Tensor, num_records: int, dtype: torch.dtype) -> torch.Tensor:
    """The clip factor of every row's record ``[n]``."""
    c = c_B.to(dtype)
    if use.rec is None:  # uniform layout: each record's factor repeated over its rows (no index)
        return c[:, None].expand(num_records, use.rows_per_record or 0).reshape(-1)
    return c.index_select(0, use.rec)


def _scaled(x: torch.Tensor, c_rows: torch.Tensor) -> torch.Tensor:
    """``c * x`` per row, rows with ``c = 0`` *selected* to zero (a non-finite row contributes exactly 0)."""
    return torch.where((c_rows > 0)[:, None], x * c_rows[:, None], _zero(x))


def clipped_sum(use: Use, c_B: torch.Tensor, num_records: int, shape: tuple[int, ...]) -> torch.Tensor:
    """``sum_r c_r grad_r`` of one use (rows of records with ``c_r = 0`` are selected away, not multiplied).

    No host synchronisation: the factors are applied to every row, whatever their values."""
    g = use.g
    if use.kind == "linear" and use.rec is None:  # uniform layout: scale each record's block of rows (a view)
        m = use.rows_per_record or 0
        c = c_B.to(g.dtype)[:, None, None]
        a, ok = use.a.to(g.dtype).reshape(num_records, m, -1), c > 0
        g = g.reshape(num_records, m, -1)
        if a.shape[2] < g.shape[2]:
            a, g = torch.where(ok, a * c, _zero(a)), torch.where(ok, g, _zero(g))
        else:
            g, a = torch.where(ok, g * c, _zero(g)), torch.where(ok, a, _zero(a))
        return g.reshape(num_records * m, -1).transpose(0, 1).matmul(a.reshape(num_records * m, -1))
    c_rows = _row_factors(use, c_B, num_records, g.dtype)
    if use.kind == "linear":
        a = use.a.to(g.dtype)
        ok = (c_rows > 0)[:, None]
        if a.shape[1] < g.shape[1]:  # scale the narrower side, select the other
            a, g = _scaled(a, c_rows), torch.where(ok, g, _zero(g))
        else:
            g, a = _scaled(g, c_rows), torch.where(ok, a, _zero(a))
        return g.transpose(0, 1).matmul(a)
    if use.kind == "embedding":
        return g.new_zeros(shape).index_add_(0, use.a, _scaled(g, c_rows))
    raise AssertionError(use.kind)


def weighted_sum(per_record: torch.Tensor, c_B: torch.Tensor) -> torch.Tensor:
    """``sum_r c_r per_record[r]`` with records of ``c_r = 0`` excluded (selected away, not multiplied)."""
    c = c_B.to(per_record.dtype)
    flat = per_record.reshape(per_record.shape[0], math.prod(per_record.shape[1:]))  # -1 is ambiguous at 0 rows
    flat = torch.where((c > 0)[:, None], flat, _zero(flat))
    return torch.mv(flat.transpose(0, 1), c).reshape(per_record.shape[1:])


#: Largest number of per-record gradient entries :func:`concat_records` concatenates at once.
CHUNK_NUMEL = 1 << 24


def concat_records(per_records: list[torch.Tensor]) -> list[tuple[list[int], torch.Tensor]]:
    """The tensors of ``per_records`` (each ``[B, ...]``) concatenated per record as ``[B, n]`` chunks
    of one dtype and at most :data:`CHUNK_NUMEL` entries (one tensor alone when larger): a chunk's
    squared norms and weighted sum are a few ops, however many tensors it holds. Returns
    ``(indices into per_records, chunk)`` pairs; empties ``per_records`` as it goes (each input is
    dropped once copied)."""
    out = []
    order = sorted(range(len(per_records)), key=lambda i: str(per_records[i].dtype))
    while order:
        first = per_records[order[0]]
        chunk, numel = [], 0
        while order and per_records[order[0]].dtype == first.dtype and (
                not chunk or numel + per_records[order[0]].numel() <= CHUNK_NUMEL):
            i = order.pop(0)
            chunk.append(i)
            numel += per_records[i].numel()
        B = first.shape[0]
        flat = [per_records[i].reshape(B, math.prod(per_records[i].shape[1:])) for i in chunk]
        out.append((chunk, flat[0] if len(flat) == 1 else torch.cat(flat, dim=1)))
        for i in chunk:
            per_records[i] = None
    return out


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


def grouped_pairs(use: Use, num_records: int) -> tuple[torch.Tensor, ...]:
    """The (expert, record) pairs of a grouped use's rows: ``key`` ``[n]`` (``e * B + r``, sorted), the
    pair ids ``[P]``, rows per pair (``counts`` ``[P]`` and ``sizes`` on the host), each pair's expert,
    record and group ``[P]``.

    Computed once per row layout: the uses of one MoE layer (``gate_up`` and ``down``, their LoRA
    factors) share their rows' records and experts, and so these, through :attr:`Use.shared`."""
    cache = use.shared if use.shared is not None else {}
    pairs = cache.get("pairs")
    if pairs is not None and pairs[0] is use.rec and pairs[1] is use.expert and pairs[2] is use.slot_groups:
        return pairs[3:]
    B = max(num_records, 1)
    key = use.expert * B + use.rec
    if key.numel() == 0:
        ids, counts, sizes = key, key, []
    else:
        ids, counts = torch.unique_consecutive(key, return_counts=True)
        sizes = counts.tolist()
    pair_expert = ids // B
    pair_group = use.slot_groups.to(ids.device).index_select(0, pair_expert)
    out = (key, ids, counts, sizes, pair_expert, ids % B, pair_group)
    cache["pairs"] = (use.rec, use.expert, use.slot_groups) + out
    return out


def grouped_sq_norms(use: Use, num_records: int, mode: str | None = None) -> GroupedNorms:
    """Squared norms of ``G_{e,r}^T A_{e,r}`` for every (expert e, record r) pair of a grouped use.

    Rows are sorted by (expert, record), so ``key = e * B + r`` is sorted and each pair's rows are
    one contiguous block (see :func:`grouped_pairs`). ``mode``: ``"ghost"`` (rows kept; one padded
    batched Gram product over every pair of the layer), ``"materialise"`` (the per-pair gradients,
    one grouped product over every pair's own rows, no padding; rows dropped) or None: chosen by
    :func:`grouped_materialise`.
    """
    key, ids, counts, sizes, pair_expert, pair_rec, pair_group = grouped_pairs(use, num_records)
    g = use.g
    a = use.a.to(g.dtype)
    d_in, d_out = a.shape[1], g.shape[1]
    if key.numel() == 0:
        sq, per = g.new_zeros(0), None
    else:
        if mode is None:
            mode = "materialise" if grouped_materialise(sizes, d_in, d_out) else "ghost"
        if mode == "materialise":  # one grouped product over every pair's rows
            cache = use.shared if use.shared is not None else {}
            offs = cache.get("pair_offsets")
            if offs is None or offs[0] is not counts:
                offs = (counts, Offsets(torch.cumsum(counts, 0).to(torch.int32), sizes))
                cache["pair_offsets"] = offs
            per = grouped_outer(g, a, offs[1])
            sq = sq_norms(per)
        elif mode == "ghost":
            gp, _ = pad_by_key(g, key, use.shared)
            ap, _ = pad_by_key(a, key, use.shared)
            sq = torch.einsum("rij,rij->r", torch.bmm(gp, gp.transpose(1, 2)), torch.bmm(ap, ap.transpose(1, 2)))
            per = None
        else:
            raise ValueError(f"mode must be 'ghost', 'materialise' or None, got {mode!r}")
    return GroupedNorms(pair_group=pair_group, pair_rec=pair_rec, sq=sq, per_pair=per, pair_expert=pair_expert)


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


def grouped_clipped_sums(use: Use, norms: GroupedNorms, c_GB: torch.Tensor, num_slots: int) -> torch.Tensor:
    """``out[e] = sum_r c[group_e, r] G_{e,r}^T A_{e,r}`` ``[num_slots, d_out, d_in]`` for every expert
    slot (zero for a slot without rows), in a few batched ops over all slots: a weighted
    ``index_add`` of the per-pair gradients, or one grouped product of the scaled rows. Pairs and
    rows of records with ``c = 0`` are selected away, not multiplied."""
    g = use.g
    if norms.per_pair is not None:
        per = norms.per_pair
        cache = use.shared if use.shared is not None else {}
        pair_c = cache.get("pair_c")  # per row layout: each pair's clip factor
        if pair_c is None or pair_c[0] is not c_GB or pair_c[1] is not norms.pair_group \
                or pair_c[2] is not norms.pair_rec or pair_c[3].dtype != per.dtype:
            pair_c = (c_GB, norms.pair_group, norms.pair_rec, c_GB[norms.pair_group, norms.pair_rec].to(per.dtype))
            cache["pair_c"] = pair_c
        c_P = pair_c[3][:, None, None]
        weighted = torch.where(c_P > 0, per * c_P, _zero(per))
        return per.new_zeros((num_slots,) + tuple(per.shape[1:])).index_add_(0, norms.pair_expert, weighted)
    cache = use.shared if use.shared is not None else {}
    rows = cache.get("rows")  # per row layout: each row's clip factor and the slots' offsets
    if rows is None or rows[0] is not c_GB or rows[1] is not use.rec or rows[2] is not use.expert \
            or rows[3] is not use.slot_groups or rows[4] != g.dtype or rows[6].end.shape[0] != num_slots:
        c_rows = c_GB.to(g.dtype)[use.slot_groups.to(g.device).index_select(0, use.expert), use.rec][:, None]
        rows = (c_GB, use.rec, use.expert, use.slot_groups, g.dtype, c_rows, Offsets.of(use.expert, num_slots),
                c_rows > 0)
        cache["rows"] = rows
    c_rows, offs, ok = rows[5], rows[6], rows[7]
    a = use.a.to(g.dtype)
    if a.shape[1] < g.shape[1]:  # scale the narrower side, select the other
        a, g = torch.where(ok, a * c_rows, _zero(a)), torch.where(ok, g, _zero(g))
    else:
        g, a = torch.where(ok, g * c_rows, _zero(g)), torch.where(ok, a, _zero(a))
    return grouped_outer(g, a, offs)


def sum_dtype(param: torch.Tensor) -> torch.dtype:
    """The dtype clipped sums and released gradients of ``param`` are kept in: float32 for
    bf16/fp16 parameters (a low-precision sum loses small per-record contributions and rounds the
    noise), else the parameter's own."""
    return torch.float32 if param.dtype in (torch.bfloat16, torch.float16) else param.dtype
