"""Capture of every use of a trainable parameter during one forward and one backward pass.

A *use* is one application of a parametrised op to a block of rows:

=========  ====================================  =======================================
kind       forward                               per-record gradient of the parameter
=========  ====================================  =======================================
linear     ``y = a W^T``                         ``sum_{t in r} g_t a_t^T``
bias       ``y = ... + b`` (Linear, or ``x + b``)   ``sum_{t in r} g_t``
embedding  ``y = W[id]``                         ``sum_{t in r} e_{id_t} g_t^T``
scale      ``y = w * x`` (norm weights)           ``sum_{t in r} g_t * x_t``
table      Switch relative-attention bias         scatter of the record's bias-gradient
grouped    ``y = a W[e]^T`` for all expert slots  per (expert, record) ``sum g_t a_t^T``
=========  ====================================  =======================================

A grouped use covers every expert of one MoE layer at once; its slots are either the leading
dimension of one fused 3-D parameter (OLMoE, Mixtral, Qwen, DeepSeek) or one 2-D parameter per
expert (Switch's ``expert_e.wi`` / ``wo``, and their LoRA factors), see :func:`grouped_linear_use`.

Each use stores its input rows ``a`` (detached), a row -> record index and, after the backward,
its output-gradient rows ``g``. The ops run through custom autograd Functions that return only
the input gradient, so autograd never computes the (discarded) full weight gradients; each use
is handed to the engine's reducer (``Use.on_ready``) as soon as its output gradient arrives.

Interception: a :class:`torch.overrides.TorchFunctionMode` active during the forward redirects
``F.linear``, ``F.embedding``, ``Tensor.__mul__`` and ``Tensor.__add__`` calls whose weight is a trainable
parameter (or a dtype cast of one); an add records a 1-D bias on the last dimension (the shift of a
norm written ``normalise(x) * weight + bias``). Any *other* differentiable op on a trainable parameter raises
:class:`UnsupportedModelError` naming the parameter: nothing is skipped silently. Fused experts
and Switch's per-expert ``Linear`` modules come in through the expert dispatch of
``raptor.per_sample.experts``, which calls :func:`grouped_linear_use`: one use per projection
covering every expert slot of the layer, with an explicit row -> record index and expert per row.
A parameter of an expert group met by the interception (outside that dispatch) raises.

Row -> record index for intercepted ops: an input of shape ``[B, ...rest, d]`` maps rows to
records along dim 0 and a flat ``[B*T, d]`` input maps row ``n`` to record ``n // T``. Any other
shape raises.

Legend: B records, T tokens per record, N = B*T, n rows of one use, d feature size.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from raptor.errors import UnsupportedModelError


@dataclass
class Use:
    """One use of one parameter (or fused slot) on a block of rows."""

    name: str
    slot: int | None
    kind: str
    group: int
    a: torch.Tensor | None = None  # rows [n, d_in] (linear, scale) or ids [n] (embedding)
    rec: torch.Tensor | None = None  # [n] sorted record index; None when rows are uniform
    rows_per_record: int | None = None  # uniform layout: rows are arange(B).repeat_interleave(m)
    keep: torch.Tensor | None = None  # row indices kept from the op's output gradient (owner masking)
    g: torch.Tensor | None = None  # [n, d_out] after the backward
    per_record: torch.Tensor | None = None  # [B, *shape] materialised directly (table)
    pad_id: int | None = None  # embedding padding_idx (rows with this id get no gradient)
    expert: torch.Tensor | None = None  # grouped: expert slot of each kept row (rows sorted by expert, record)
    slot_groups: torch.Tensor | None = None  # grouped: group index of each expert slot [E]
    slot_names: tuple[str, ...] | None = None  # grouped over per-expert 2-D weights: each slot's parameter
    shared: dict | None = None  # grouped: a cache shared by the uses of one MoE layer's rows (same rec/expert)
    on_ready: object = None  # callback(use) once the output gradient is in (the engine's reducer)
    reduced: bool = False  # set by the reducer (a safety check that no use is left out)

    def set_grad(self, g_rows: torch.Tensor) -> None:
        g_rows = g_rows.detach()
        if self.keep is not None:
            g_rows = g_rows.index_select(0, self.keep)
        if self.kind == "embedding" and self.pad_id is not None:
            g_rows = torch.where((self.a == self.pad_id)[:, None], 0.0, g_rows)
        self.g = g_rows
        if self.on_ready is not None:
            self.on_ready(self)


@dataclass
class Tape:
    """Per-call capture state (one ``engine.compute``)."""

    num_records: int
    tokens_per_record: int
    param_names: dict[int, str]  # id(param) -> name, trainable params only
    group_of: dict[tuple[str, int | None], int]  # (name, slot) -> group index
    expert_of_group: dict[int, tuple[int, int]]  # group index -> (layer, expert) for expert groups
    special: frozenset[str] = frozenset()  # params handled by family hooks only
    uses: list[Use] = field(default_factory=list)
    owners: dict[int, torch.Tensor] = field(default_factory=dict)
    aliases: dict[int, tuple[str, torch.Tensor]] = field(default_factory=dict)
    on_ready: object = None  # callback(use) set on every use (see ``Use.on_ready``)

    # ------------------------------------------------------------ lookup
    def name_of(self, t: object) -> str | None:
        if not isinstance(t, torch.Tensor):
            return None
        name = self.param_names.get(id(t))
        if name is not None:
            return name
        alias = self.aliases.get(id(t))
        if alias is not None and alias[1] is t:
            return alias[0]
        return None

    def group(self, name: str, slot: int | None) -> int:
        key = (name, slot)
        if key not in self.group_of:
            key = (name, None)
        return self.group_of[key]

    def rows(self, leading: tuple[int, ...]) -> tuple[None, int]:
        """Row -> record layout (``rec``, rows per record) of an input whose leading shape is ``leading``."""
        n = math.prod(leading)
        B, T = self.num_records, self.tokens_per_record
        if len(leading) == 1 and n == B * T:
            return None, T
        if len(leading) >= 1 and leading[0] == B and B > 0:
            return None, n // B
        if B == 0 and n == 0:
            return None, 0
        raise UnsupportedModelError(
            f"cannot map rows of shape {tuple(leading)} to records (batch {B} x {T} tokens); the engine "
            "supports inputs shaped [B, ..., d] or [B*T, d]"
        )

    def new_use(self, name: str, slot: int | None, kind: str, leading: tuple[int, ...], a: torch.Tensor | None,
                **kw) -> Use:
        group = self.group(name, slot)
        expert = self.expert_of_group.get(group)
        if expert is not None:
            raise UnsupportedModelError(
                f"parameter {name!r} of expert group {expert} is used outside its layer's expert dispatch"
            )
        rec, m = self.rows(leading)
        use = Use(name=name, slot=slot, kind=kind, group=group, a=a, rec=rec, rows_per_record=m,
                  on_ready=self.on_ready, **kw)
        self.uses.append(use)
        return use

    # ------------------------------------------------------------ recorded ops
    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        wname, bname = self.name_of(weight), self.name_of(bias)
        leading = tuple(x.shape[:-1])
        use_w = use_b = None
        if wname is not None:
            use_w = self.new_use(wname, None, "linear", leading, x.detach().reshape(-1, x.shape[-1]))
        if bname is not None:
            use_b = self.new_use(bname, None, "bias", leading, None)
        return _LinearFn.apply(x, weight, bias, use_w, use_b, None)

    def embedding(self, ids: torch.Tensor, weight: torch.Tensor, padding_idx: int | None) -> torch.Tensor:
        name = self.name_of(weight)
        pad = None
        if padding_idx is not None:
            pad = padding_idx if padding_idx >= 0 else weight.shape[0] + padding_idx
        use = self.new_use(name, None, "embedding", tuple(ids.shape), ids.reshape(-1), pad_id=pad)
        return _EmbeddingFn.apply(ids, weight, pad, use)

    def shift(self, x: torch.Tensor, bias: torch.Tensor, name: str) -> torch.Tensor:
        """``x + bias`` for a 1-D ``bias`` on the last dimension, recorded as a bias use."""
        if bias.ndim != 1 or x.ndim < 2 or x.shape[-1] != bias.shape[0]:
            raise UnsupportedModelError(
                f"parameter {name!r} (shape {tuple(bias.shape)}) is added to a tensor of shape {tuple(x.shape)}; "
                "the engine supports 1-D biases on the last dimension only"
            )
        use = self.new_use(name, None, "bias", tuple(x.shape[:-1]), None)
        return _ShiftFn.apply(x, bias, use)

    def scale(self, x: torch.Tensor, weight: torch.Tensor, name: str) -> torch.Tensor:
        if weight.ndim != 1 or x.ndim < 2 or x.shape[-1] != weight.shape[0]:
            raise UnsupportedModelError(
                f"parameter {name!r} (shape {tuple(weight.shape)}) multiplies a tensor of shape {tuple(x.shape)}; "
                "the engine supports 1-D scale weights on the last dimension only"
            )
        use = self.new_use(name, None, "scale", tuple(x.shape[:-1]), x.detach().reshape(-1, x.shape[-1]))
        return _ScaleFn.apply(x, weight, use)


def grouped_linear_use(tape: Tape, x_S: torch.Tensor, weights: torch.Tensor | Sequence[torch.Tensor],
                       offs: Offsets, rec_S: torch.Tensor, expert_S: torch.Tensor, keep: torch.Tensor | None,
                       layer: int, shared: dict | None = None) -> torch.Tensor:
    """``y[rows of e] = x[rows of e] @ W[e]^T`` for every expert slot e, recorded as one use.

    ``weights``: one fused 3-D parameter ``[E, d_out, d_in]`` or a sequence of E 2-D parameters
    ``[d_out, d_in]`` (one per expert, every one trainable). Rows are sorted by expert (then
    record); ``offs`` (:class:`Offsets`) says which rows belong to each slot. ``keep``: the rows whose record owns their
    expert (roles grouping), or None for all rows. ``shared``: one dict per layer dispatch, passed to
    every grouped use of that layer's rows (same ``rec_S``, ``expert_S``, ``keep``): their kept
    records and experts, slot groups and what the reducer derives from them (pairs, offsets, clip
    factors per row) are then computed once per layer instead of once per use.
    """
    if isinstance(weights, torch.Tensor):
        name = tape.name_of(weights)
        slot_names = None
        groups = [tape.group(name, e) for e in range(weights.shape[0])]
        tensors: tuple[torch.Tensor, ...] = (weights,)
    else:
        slot_names = tuple(tape.name_of(w) for w in weights)
        if None in slot_names:
            raise UnsupportedModelError(
                f"MoE layer {layer}: a grouped expert projection mixes trainable and frozen expert weights; "
                "freeze or train that projection in every expert of the layer"
            )
        name = slot_names[0]
        groups = [tape.group(n, None) for n in slot_names]
        tensors = tuple(weights)
    for e, group in enumerate(groups):
        expert = tape.expert_of_group.get(group)
        if expert is not None and expert != (layer, e):
            raise UnsupportedModelError(
                f"expert weight {slot_names[e] if slot_names else name!r} slot {e} is in group {expert}, "
                f"not in layer {layer}"
            )
    a = x_S.detach()
    if keep is not None:
        a = a.index_select(0, keep)
    if shared is None:
        shared = {}
    rows = shared.get("rows_kept")
    if rows is None or rows[0] is not rec_S or rows[1] is not expert_S or rows[2] is not keep:
        rec, exp = rec_S, expert_S
        if keep is not None:
            rec, exp = rec.index_select(0, keep), exp.index_select(0, keep)
        rows = (rec_S, expert_S, keep, rec, exp)
        shared["rows_kept"] = rows
    rec, exp = rows[3], rows[4]
    known = shared.get("slot_groups")  # one object for the layer's uses (the reducer's caches key on it)
    if known is None or known[0] != groups:
        known = (groups, torch.tensor(groups, dtype=torch.long))
        shared["slot_groups"] = known
    slot_groups = known[1]
    use = Use(name=name, slot=None, kind="grouped", group=-1, a=a, rec=rec, keep=keep, expert=exp,
              slot_groups=slot_groups, slot_names=slot_names, on_ready=tape.on_ready, shared=shared)
    tape.uses.append(use)
    return GroupedLinearFn.apply(x_S, offs, use, *tensors)


class GroupedLinearFn(torch.autograd.Function):
    """Per-expert ``x @ W[e]^T`` over rows sorted by expert; the backward returns only ``dx``.

    ``weights``: one 3-D tensor (slot e = ``W[e]``) or E 2-D tensors. ``offs``: :class:`Offsets` of
    the rows of each slot. ``use`` (or None for frozen weights) receives the output-gradient rows;
    no weight gradient is ever formed. Forward and input gradient are one grouped matrix product
    each (:func:`grouped_mm`), not one product per expert.
    """

    @staticmethod
    def forward(ctx, x_S, offs, use, *weights):
        ctx.save_for_backward(*weights)
        ctx.offs = offs
        ctx.use = use
        return grouped_mm(x_S, _stacked(weights, x_S.dtype).transpose(1, 2), offs)

    @staticmethod
    def backward(ctx, g_S):
        if ctx.use is not None:
            ctx.use.set_grad(g_S)
        gx = None
        if ctx.needs_input_grad[0]:
            gx = grouped_mm(g_S, _stacked(ctx.saved_tensors, g_S.dtype), ctx.offs)
        return (gx, None, None) + (None,) * len(ctx.saved_tensors)


@dataclass
class Offsets:
    """Row offsets of groups of rows sorted by group: ``end`` = cumulative row counts ``[E]`` (int32,
    on the rows' device, no host copy); ``counts()`` copies the counts to the host only when a
    per-group loop needs them (float64, or shapes the grouped kernel does not take)."""

    end: torch.Tensor
    _counts: list[int] | None = None

    @classmethod
    def of(cls, group_S: torch.Tensor, num_groups: int) -> Offsets:
        """Offsets of rows whose sorted group index is ``group_S`` (values in ``[0, num_groups)``)."""
        return cls(torch.cumsum(torch.bincount(group_S, minlength=num_groups)[:num_groups], 0).to(torch.int32))

    def counts(self) -> list[int]:
        if self._counts is None:
            end = self.end.tolist()
            self._counts = [b - a for a, b in zip([0] + end[:-1], end, strict=True)]
        return self._counts


#: Use ``torch._grouped_mm`` where it applies; tests set it to False to run the per-group loop.
GROUPED_KERNEL = hasattr(torch, "_grouped_mm")
_KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@functools.cache
def _kernel_runs(device: torch.device, dtype: torch.dtype) -> bool:
    """Does this build's ``torch._grouped_mm`` run for ``dtype`` on ``device`` AND agree with the
    per-group loop, in the three forms the engine calls it: ``x W^T`` with ``W`` a transposed view
    (forward), ``g W`` (input gradient), and the per-group outer product ``g^T x`` (weight gradient),
    with an empty group inside and at the end and group sizes that are not multiples of 16?

    Probed once per (device, dtype), on fixed operands (not a privacy draw). A CUDA build may take
    only some dtypes, and grouped kernels have returned wrong values for some layouts and for empty
    groups (the bf16 check on an H200 missed by 20% while the same check passed on CPU): a kernel
    that raises or disagrees is not used, and the loop gives the right answer more slowly."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    counts = [5, 0, 19, 0]
    x32, w32, g32 = (torch.randn(*shape, generator=gen) for shape in ((24, 32), (4, 48, 32), (24, 48)))
    end = torch.tensor(counts).cumsum(0).to(torch.int32)
    try:
        with torch.no_grad():
            x, w, g = (t.to(device=device, dtype=dtype) for t in (x32, w32, g32))
            offs = end.to(device)
            got = [torch._grouped_mm(x, w.transpose(1, 2), offs=offs), torch._grouped_mm(g, w, offs=offs),
                   torch._grouped_mm(g.t(), x, offs=offs)]
            got = [t.float().cpu() for t in got]
    except (RuntimeError, NotImplementedError):
        return False
    x, w, g = (t.to(dtype).float() for t in (x32, w32, g32))  # the same rounded operands, float32 products
    starts = [0] + end.tolist()[:-1]
    rows = [slice(a, a + n) for a, n in zip(starts, counts, strict=True)]
    want = [torch.cat([x[r] @ w[e].t() for e, r in enumerate(rows)]), torch.cat([g[r] @ w[e] for e, r in enumerate(rows)]),
            torch.stack([g[r].t() @ x[r] for r in rows])]
    return all(a.shape == b.shape and bool(torch.allclose(a, b, rtol=2e-2, atol=2e-2 * float(b.abs().max())))
               for a, b in zip(got, want, strict=True))


def grouped_kernel_runs(device: torch.device | str, dtype: torch.dtype) -> bool:
    """Whether ``torch._grouped_mm`` is used for ``dtype`` on ``device`` (see :func:`_kernel_runs`)."""
    return GROUPED_KERNEL and dtype in _KERNEL_DTYPES and _kernel_runs(torch.device(device), dtype)


def _kernel_ok(*tensors: torch.Tensor) -> bool:
    """Does ``torch._grouped_mm`` take these operands (dtype; 16-byte aligned data and strides), and
    does it compute them right on their device (:func:`_kernel_runs`)?"""
    if not GROUPED_KERNEL:
        return False
    for t in tensors:
        if t.dtype not in _KERNEL_DTYPES or t.dtype != tensors[0].dtype or t.data_ptr() % 16:
            return False
        # every stride but the contiguous (innermost) dimension's must be a multiple of 16 bytes, also
        # of a dimension of size 1 (the kernel checks them all): a [S, 1] column (bert_moe's expert
        # biases, recorded as uses on ones) has a 4-byte row stride, and so has the [1, 1] of one row
        inner = t.dim() - 1 if t.stride()[-1] == 1 else t.dim() - 2
        if any(d != inner and (s * t.element_size()) % 16 for d, s in enumerate(t.stride())):
            return False
        if t.dim() >= 2 and 1 not in t.stride()[-2:]:
            return False
    return _kernel_runs(tensors[0].device, tensors[0].dtype)


def grouped_mm(x_S: torch.Tensor, w_EIO: torch.Tensor, offs: Offsets) -> torch.Tensor:
    """``y[rows of e] = x[rows of e] @ w[e]`` (``x [S, I]`` sorted by group, ``w [E, I, O]``): one
    grouped kernel where it applies, else one ``mm`` per group."""
    if x_S.shape[0] and _kernel_ok(x_S, w_EIO):
        return torch._grouped_mm(x_S, w_EIO, offs=offs.end)
    out = x_S.new_empty((x_S.shape[0], w_EIO.shape[2]))
    start = 0
    for e, n in enumerate(offs.counts()):
        if n:
            torch.mm(x_S[start:start + n], w_EIO[e], out=out[start:start + n])
        start += n
    return out


def grouped_outer(g_S: torch.Tensor, a_S: torch.Tensor, offs: Offsets) -> torch.Tensor:
    """``out[e] = g[rows of e]^T @ a[rows of e]`` ``[E, d_out, d_in]`` for rows sorted by group (zero
    for a group without rows): one grouped kernel where it applies, else one ``mm`` per group."""
    E = offs.end.shape[0]
    gt = g_S.t()
    if g_S.shape[0] and _kernel_ok(gt, a_S):
        return torch._grouped_mm(gt, a_S, offs=offs.end)
    out = g_S.new_zeros((E, g_S.shape[1], a_S.shape[1]))
    start = 0
    for e, n in enumerate(offs.counts()):
        if n:
            torch.mm(gt[:, start:start + n], a_S[start:start + n], out=out[e])
        start += n
    return out


def _stacked(weights: Sequence[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """The slots as one ``[E, d_out, d_in]`` tensor in ``dtype`` (a fused 3-D weight as it is)."""
    w = weights[0] if len(weights) == 1 and weights[0].dim() == 3 else torch.stack(tuple(weights))
    return w.to(dtype)


class _LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, use_w, use_b, slot):
        # ``slot``: expert index into a fused 3-D weight (indexed here, under no-grad, so the
        # capture mode does not see a differentiable use of the parameter).
        ctx.save_for_backward(weight)
        ctx.uses = (use_w, use_b)
        ctx.slot = slot
        return F.linear(x, weight if slot is None else weight[slot], bias)

    @staticmethod
    def backward(ctx, g):
        (weight,) = ctx.saved_tensors
        if ctx.slot is not None:
            weight = weight[ctx.slot]
        g_rows = g.reshape(-1, g.shape[-1])
        for use in ctx.uses:
            if use is not None:
                use.set_grad(g_rows)
        gx = g.matmul(weight.to(g.dtype)) if ctx.needs_input_grad[0] else None
        return gx, None, None, None, None, None


class _EmbeddingFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ids, weight, pad, use):
        ctx.use = use
        return F.embedding(ids, weight, pad)

    @staticmethod
    def backward(ctx, g):
        ctx.use.set_grad(g.reshape(-1, g.shape[-1]))
        return None, None, None, None


class _ShiftFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias, use):
        ctx.use = use
        return x + bias

    @staticmethod
    def backward(ctx, g):
        ctx.use.set_grad(g.reshape(-1, g.shape[-1]))
        return g, None, None


class _ScaleFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, use):
        ctx.save_for_backward(weight)
        ctx.use = use
        return weight * x

    @staticmethod
    def backward(ctx, g):
        (weight,) = ctx.saved_tensors
        ctx.use.set_grad(g.reshape(-1, g.shape[-1]))
        gx = g * weight if ctx.needs_input_grad[0] else None
        return gx, None, None


class TableFn(torch.autograd.Function):
    """Switch relative-attention bias: ``W[bucket]`` broadcast to every record as ``[B, H, Tq, Tk]``.

    The per-record gradient of the table is the scatter of that record's bias gradient over the
    buckets: ``grad_r[b, h] = sum_{i,j: bucket[i,j]=b} G[r, h, i, j]``.
    """

    @staticmethod
    def forward(ctx, bucket, weight, num_records, use):
        ctx.use = use
        ctx.save_for_backward(bucket)
        ctx.table_shape = tuple(weight.shape)
        # index_select, not F.embedding: the capture mode is active here (grad is off in forward).
        values = weight.index_select(0, bucket.reshape(-1)).reshape(*bucket.shape, weight.shape[1])  # [Tq, Tk, H]
        return values.permute(2, 0, 1).unsqueeze(0).expand(num_records, -1, -1, -1)

    @staticmethod
    def backward(ctx, g_BHQK):
        (bucket,) = ctx.saved_tensors
        B, H = g_BHQK.shape[:2]
        g_BPH = g_BHQK.permute(0, 2, 3, 1).reshape(B, -1, H)
        per = g_BPH.new_zeros((B,) + ctx.table_shape)
        per.index_add_(1, bucket.reshape(-1), g_BPH)
        ctx.use.per_record = per
        if ctx.use.on_ready is not None:
            ctx.use.on_ready(ctx.use)
        return None, None, None, None


_MUL = {torch.Tensor.__mul__, torch.Tensor.__rmul__, torch.Tensor.mul, torch.mul}
_ADD = {torch.Tensor.__add__, torch.Tensor.__radd__, torch.Tensor.add, torch.add}
_CAST = {torch.Tensor.to, torch.Tensor.type, torch.Tensor.float, torch.Tensor.double, torch.Tensor.half,
         torch.Tensor.bfloat16}


def _tensors_in(args, kwargs):
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (x for x in a if isinstance(x, torch.Tensor))


class CaptureMode(TorchFunctionMode):
    """Redirects parametrised ops on trainable parameters to recorded Functions (see module doc)."""

    def __init__(self, tape: Tape):
        super().__init__()
        self.tape = tape

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tape = self.tape
        if func is F.linear:
            x = args[0] if args else kwargs["input"]
            weight = args[1] if len(args) > 1 else kwargs["weight"]
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            if tape.name_of(weight) is not None or tape.name_of(bias) is not None:
                self._check_special(weight, bias)
                return tape.linear(x, weight, bias)
        elif func is F.embedding:
            ids = args[0] if args else kwargs["input"]
            weight = args[1] if len(args) > 1 else kwargs["weight"]
            name = tape.name_of(weight)
            if name is not None:
                self._check_special(weight)
                opts = dict(zip(("padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse"),
                                args[2:], strict=False))
                opts.update(kwargs)
                if opts.get("max_norm") is not None or opts.get("scale_grad_by_freq") or opts.get("sparse"):
                    raise UnsupportedModelError(
                        f"embedding {name!r} uses max_norm/scale_grad_by_freq/sparse, which the engine does not support"
                    )
                return tape.embedding(ids, weight, opts.get("padding_idx"))
        elif func in _MUL and len(args) == 2:
            a, b = args
            na, nb = tape.name_of(a), tape.name_of(b)
            if (na is not None) != (nb is not None):
                w, x, name = (a, b, na) if na is not None else (b, a, nb)
                if isinstance(x, torch.Tensor):
                    self._check_special(w)
                    return tape.scale(x, w, name)
        elif func in _ADD and len(args) == 2 and not kwargs:
            a, b = args
            na, nb = tape.name_of(a), tape.name_of(b)
            if (na is not None) != (nb is not None):
                w, x, name = (a, b, na) if na is not None else (b, a, nb)
                if isinstance(x, torch.Tensor) and x.ndim >= 2 and w.ndim == 1:
                    self._check_special(w)
                    return tape.shift(x, w, name)
        elif func in _CAST and args and tape.name_of(args[0]) is not None:
            out = func(*args, **kwargs)
            if out is not args[0] and isinstance(out, torch.Tensor):
                tape.aliases[id(out)] = (tape.name_of(args[0]), out)
            return out
        if torch.is_grad_enabled() and not _is_query(func):
            for t in _tensors_in(args, kwargs):
                name = tape.name_of(t)
                if name is not None:
                    raise UnsupportedModelError(
                        f"trainable parameter {name!r} is used by {getattr(func, '__name__', func)}, an op the "
                        "per-record engine cannot differentiate per record; freeze it or use a supported layer "
                        "(Linear, Embedding, 1-D norm scale, fused experts)"
                    )
        return func(*args, **kwargs)

    def _check_special(self, *tensors) -> None:
        for t in tensors:
            name = self.tape.name_of(t)
            if name in self.tape.special:
                raise UnsupportedModelError(f"parameter {name!r} is only supported through its family hook")


_QUERY_NAMES = {"size", "dim", "numel", "is_floating_point", "data_ptr", "is_contiguous", "element_size",
                "get_device", "__len__", "nelement", "ndimension", "stride", "storage_offset", "__hash__",
                "is_complex", "__format__", "__repr__", "requires_grad_", "detach",
                "_has_compatible_shallow_copy_type"}
# Attributes whose value is not a differentiable view of the parameter (``.T``, ``.mT``, ``.data``
# and friends are not here: they would carry gradient around the capture).
_SAFE_ATTRS = {"dtype", "shape", "device", "requires_grad", "is_leaf", "ndim", "layout", "is_cuda", "is_meta",
               "is_sparse", "is_quantized", "grad", "grad_fn", "_version", "names", "itemsize", "nbytes"}


def _is_query(func) -> bool:
    name = getattr(func, "__name__", "")
    if name in ("__get__", "__set__"):
        attr = getattr(getattr(func, "__self__", None), "__name__", "")
        return attr in _SAFE_ATTRS or (name == "__set__" and attr == "data")
    return name in _QUERY_NAMES
