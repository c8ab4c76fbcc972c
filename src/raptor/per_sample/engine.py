"""The per-record, per-role gradient engine: one forward, one backward, clipped sums per group.

For a batch of B records and groups g (``shared`` + ``expert/l/e``, or ``dense``) it returns

* ``norms[g][r] = ||grad_g(r)||``: record r's gradient restricted to group g's parameters. Under
  ``grouping="roles"`` a record's gradient reaches only its owner expert's parameters in each
  trained layer (the rows of its non-owner (token, expert) pairs are dropped from expert
  parameter gradients), while the shared group gets the record's full gradient through every
  path, non-owner experts included;
* ``c[g][r] = min(1, C_g / norms[g][r])`` (``1`` where the norm is 0), and ``c = 0`` for every
  group of a record whose norms are not all finite (counted in ``num_nonfinite``);
* ``clipped_sums[name] = sum_r sum_g c[g][r] grad_{name}(r)``, the book-keeping clipped sum of
  every trainable parameter (fused expert weights hold each expert's sum in its slot). A parameter
  no record's gradient reached (e.g. an expert that owns no record of the batch) gets a broadcast
  zero (``expand`` of one scalar: no memory, and an in-place op on it raises instead of writing):
  treat the sums as read-only values and ``clone()`` one before modifying it.

How (see :mod:`raptor.per_sample.capture` and :mod:`raptor.per_sample.norms`): every use of a
trainable parameter is recorded during the forward (input rows, row -> record index); custom
autograd Functions return only input gradients (autograd never forms the full weight gradients)
and hand each use's output-gradient rows to a reducer during the single backward pass, which adds
the use's per-record squared norms (ghost or materialised) and keeps the smaller of rows or
per-record gradients; once the backward is done the clip factors are known and the clipped sums
are formed from what was kept (book-keeping). Nothing is stored on ``nn.Parameter``
(``.grad`` is never written); results are returned as values.

Privacy: this module computes per-record quantities; it releases nothing. The clipped sums have
sensitivity ``C_g`` per group under add/remove adjacency, which the mechanisms layer relies on.

Legend: B records, T tokens per record, K labels, G groups.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from raptor.errors import ConfigError, DataError, UnsupportedModelError
from raptor.moe.adapters import MoELayerInfo, get_adapter
from raptor.per_sample import experts as _experts
from raptor.per_sample.capture import CaptureMode, TableFn, Tape, Use
from raptor.per_sample.norms import (
    GroupedNorms,
    clipped_sum,
    concat_records,
    ghost_sq_norm,
    grouped_clipped_sums,
    grouped_sq_norms,
    keep_rows,
    materialise,
    sq_norms,
    sum_dtype,
    weighted_sum,
)
from raptor.roles.groups import GroupKey, GroupMap, build_group_map


def cross_entropy_per_record(logits_BK: torch.Tensor, labels_B: torch.Tensor) -> torch.Tensor:
    """Per-record cross-entropy ``[B]`` (no reduction: every record keeps its own loss)."""
    if logits_BK.dtype not in (torch.float32, torch.float64):
        logits_BK = logits_BK.float()
    return F.cross_entropy(logits_BK, labels_B, reduction="none")


@dataclass
class EngineResult:
    """Per-record norms per group, clipped sums per parameter, owners, non-finite count."""

    loss_B: torch.Tensor
    norms: dict[GroupKey, torch.Tensor]
    clipped_sums: dict[str, torch.Tensor]
    owners: dict[int, torch.Tensor]
    num_nonfinite: int
    nonfinite_B: torch.Tensor
    clip_factors: dict[GroupKey, torch.Tensor]


def _batch_parts(batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    for key in ("input_ids", "attention_mask", "labels"):
        if key not in batch:
            raise DataError(f"batch is missing {key!r}; it needs input_ids [B,T], attention_mask [B,T], labels [B]")
    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    # labels: [B] (one class per record) or [B,T] (per-token targets of the generative objective)
    if ids.dim() != 2 or mask.shape != ids.shape or labels.shape not in (ids.shape[:1], ids.shape):
        raise DataError(
            f"batch shapes do not match: input_ids {tuple(ids.shape)}, attention_mask {tuple(mask.shape)}, "
            f"labels {tuple(labels.shape)}; expected [B,T], [B,T], [B] or [B,T]"
        )
    return ids, mask, labels


def model_inputs(batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The model's keyword inputs: every batch entry but ``labels`` (e.g. a vision-language model's
    ``images`` [B,3,H,W] and ``images_seq_mask`` [B,T] besides ``input_ids``/``attention_mask``)."""
    return {k: v for k, v in batch.items() if k != "labels"}


class PerRecordEngine:
    """Per-record gradient norms and clipped sums per group for an HF MoE classifier.

    ``trained_layers``: MoE block indices whose experts are trained (roles grouping); expert
    parameters of other MoE layers must be frozen. ``grouping``: ``"roles"`` or ``"dense"``.
    The model is prepared by its adapter (aux losses, jitter and dropout off) at construction.
    ``head_params``: parameter names forming the shared stream's ``head`` group (roles grouping).
    """

    def __init__(self, model: nn.Module, *, trained_layers: Sequence[int] = (), grouping: str = "roles",
                 loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = cross_entropy_per_record,
                 head_params: Sequence[str] = ()):
        self.model = model
        self.grouping = grouping
        self.trained_layers = tuple(int(x) for x in trained_layers)
        self.loss_fn = loss_fn
        self.adapter = get_adapter(model)
        self.adapter.prepare(model)
        self.layers: list[MoELayerInfo] = self.adapter.moe_layers(model)
        for info in self.layers:
            if info.fused and not hasattr(type(info.experts), "_apply_gate"):
                raise UnsupportedModelError(
                    f"the experts of MoE layer {info.index} are wrapped by {type(info.experts).__name__}; PEFT LoRA "
                    "on fused 3-D expert parameters (target_parameters) is not supported by the engine: use "
                    "raptor.moe.expert_lora.add_expert_lora for per-expert LoRA on fused experts"
                )
        self.group_map: GroupMap = build_group_map(
            model, [info.expert_params() for info in self.layers], trained_layers=self.trained_layers,
            grouping=grouping, head_params=head_params,
        )
        self.group_keys: tuple[GroupKey, ...] = self.group_map.keys
        self._group_index = {k: i for i, k in enumerate(self.group_keys)}
        self._group_of: dict[tuple[str, int | None], int] = {}
        for key, slices in self.group_map.groups.items():
            for s in slices:
                self._group_of[(s.name, s.index)] = self._group_index[key]
        self._expert_of_group = {i: (k.layer, k.expert_id) for k, i in self._group_index.items() if k.is_expert}
        self._param_names = {id(p): n for n, p in self.group_map.params.items()}
        self._tables = self._find_tables()
        self._special = frozenset(name for name, _ in self._tables)

    # ------------------------------------------------------------------ public API
    def route(self, batch: Mapping[str, torch.Tensor]) -> dict[int, torch.Tensor]:
        """Owner ``[B]`` per MoE layer for a batch, without gradients.

        Privacy: owners of private records are private; use this for public statistics only.
        """
        ids, mask = batch["input_ids"], batch["attention_mask"]
        B = ids.shape[0]
        if B == 0:
            return {info.index: torch.zeros(0, dtype=torch.long) for info in self.layers}
        call = self._call(None, mask)
        with torch.no_grad(), self._installed(call):
            self.model(**model_inputs(batch))
        return dict(call.owners)

    def compute(self, batch: Mapping[str, torch.Tensor], clip_norms: Mapping[GroupKey | str, float]) -> EngineResult:
        """Norms, clip factors and clipped sums for one batch in one forward and one backward.

        Grad mode: the engine runs its own backward and returns values (it writes no ``.grad`` and
        its results hold no graph), so the caller's grad mode does not change what it computes:
        under ``torch.no_grad()`` it enables autograd for its own forward/backward, as
        ``torch.func.grad`` does. Under ``torch.inference_mode()`` no backward is possible (its
        tensors cannot be saved for one): a :class:`ConfigError` says so, instead of zero gradients.
        """
        if torch.is_inference_mode_enabled():
            raise ConfigError(
                "PerRecordEngine.compute runs a backward pass, which torch.inference_mode() forbids; call it "
                "outside inference_mode (torch.no_grad() is fine: the engine enables autograd for its own pass)"
            )
        with torch.enable_grad():
            return self._compute(batch, clip_norms)

    def _compute(self, batch: Mapping[str, torch.Tensor], clip_norms: Mapping[GroupKey | str, float]) -> EngineResult:
        ids, mask, labels = _batch_parts(batch)
        C_G = self._clip_vector(clip_norms)
        B, T = ids.shape
        if B == 0:
            return self._empty_result(ids.device)
        tape = Tape(num_records=B, tokens_per_record=T, param_names=self._param_names, group_of=self._group_of,
                    expert_of_group=self._expert_of_group, special=self._special)
        reducer = _Reducer(tape, self.group_map.params, len(self.group_keys), B, ids.device)
        tape.on_ready = reducer.on_ready
        try:
            return self._run(batch, labels, tape, reducer, C_G)
        finally:
            reducer.release()

    def _run(self, batch: Mapping[str, torch.Tensor], labels: torch.Tensor, tape: Tape, reducer: _Reducer,
             C_G: torch.Tensor) -> EngineResult:
        ids, mask = batch["input_ids"], batch["attention_mask"]
        B = ids.shape[0]
        call = self._call(tape, mask)
        with self._installed(call), CaptureMode(tape):
            logits = self.model(**model_inputs(batch)).logits
        loss_B = self.loss_fn(logits, labels)
        if loss_B.shape != (B,):
            raise ConfigError(f"loss_fn must return one loss per record, shape ({B},), got {tuple(loss_B.shape)}")
        missing = [layer for layer in self._owner_layers() if layer not in call.owners]
        if missing:
            raise UnsupportedModelError(f"no routing was observed for MoE layers {missing}")
        before = {n: p.grad for n, p in self.group_map.params.items()}
        if loss_B.requires_grad:
            loss_B.sum().backward()
        elif self.group_map.params:  # trainable parameters the loss does not reach: never zeros in silence
            raise UnsupportedModelError(
                f"the loss does not depend on the {len(self.group_map.params)} trainable parameters (e.g. "
                f"{next(iter(self.group_map.params))!r}): autograd recorded nothing during the forward"
            )
        for n, p in self.group_map.params.items():
            if p.grad is not before[n]:
                raise UnsupportedModelError(
                    f"parameter {n!r} received a gradient outside the engine's recorded ops; it is used by an op "
                    "the engine does not handle"
                )
        norms_GB, c_GB, sums, nonfinite_B = self._reduce(tape, reducer, C_G, B, ids.device)
        return EngineResult(
            loss_B=loss_B.detach(),
            norms=dict(zip(self.group_keys, norms_GB.unbind(0), strict=True)),  # one op for every group's row
            clipped_sums=sums,
            owners=dict(call.owners),
            num_nonfinite=int(nonfinite_B.sum()),
            nonfinite_B=nonfinite_B,
            clip_factors=dict(zip(self.group_keys, c_GB.unbind(0), strict=True)),
        )

    # ------------------------------------------------------------------ reduction
    def _reduce(self, tape: Tape, reducer: _Reducer, C_G: torch.Tensor, B: int, device):
        params = self.group_map.params
        norms2_GB = reducer.finish()
        nonfinite_B = ~torch.isfinite(norms2_GB).all(dim=0)
        norms_GB = norms2_GB.sqrt()
        C = C_G.to(device)[:, None]
        c_GB = torch.where(norms_GB > C, C / norms_GB, 1.0)
        c_GB = torch.where(nonfinite_B[None, :], 0.0, c_GB)
        parts: dict[str, dict[int | None, torch.Tensor]] = defaultdict(dict)
        with torch.no_grad():
            while reducer.items:
                how, key, group, obj = reducer.items.pop()  # dropping each item as it is used lowers the peak
                if how == "chunk":  # materialised per-record gradients of several uses: one weighted sum
                    keys, shapes = key, obj[1]
                    total = weighted_sum(obj[0], c_GB[group])
                    for (name, slot), shape, part in zip(keys, shapes, total.split([math.prod(x) for x in shapes]),
                                                         strict=True):
                        _add_part(parts, params[name], name, slot, part.reshape(shape))
                    continue
                name, slot = key
                p = params[name]
                if how == "rows":
                    shape = tuple(p.shape[1:]) if slot is not None else tuple(p.shape)
                    _add_part(parts, p, name, slot, clipped_sum(obj, c_GB[group], B, shape))
                    continue
                use, slot_names = obj[0], obj[0].slot_names
                num_slots = p.shape[0] if slot_names is None else len(slot_names)
                sums_E = grouped_clipped_sums(use, obj[1], c_GB, num_slots)  # every slot at once
                if slot_names is None:
                    parts[name][None] = sums_E.to(sum_dtype(p))
                for e, target in enumerate(slot_names or ()):
                    parts[target][None] = sums_E[e].to(sum_dtype(params[target]))
        sums = {name: _assemble(p, parts.get(name, {})) for name, p in params.items()}
        return norms_GB, c_GB, sums, nonfinite_B

    # ------------------------------------------------------------------ helpers
    def _clip_vector(self, clip_norms: Mapping[GroupKey | str, float]) -> torch.Tensor:
        table = {}
        for k, v in clip_norms.items():
            key = GroupKey.parse(k) if isinstance(k, str) else k
            table[key] = float(v)
        missing = [str(k) for k in self.group_keys if k not in table]
        if missing:
            shown = ", ".join(missing[:6]) + (" ..." if len(missing) > 6 else "")
            raise ConfigError(f"clip_norms has no entry for groups {shown}; every group needs a clip norm")
        values = [table[k] for k in self.group_keys]
        for k, v in zip(self.group_keys, values, strict=True):
            if not v >= 0.0:
                raise ConfigError(f"clip norm of group {k} must be >= 0 (inf = no clipping), got {v}")
        return torch.tensor(values, dtype=torch.float64)

    def _empty_result(self, device) -> EngineResult:
        sums = {n: torch.zeros_like(p, dtype=sum_dtype(p)) for n, p in self.group_map.params.items()}
        empty = torch.zeros(0, dtype=torch.float64, device=device)
        return EngineResult(
            loss_B=torch.zeros(0, device=device), norms={k: empty.clone() for k in self.group_keys},
            clipped_sums=sums, owners={i: torch.zeros(0, dtype=torch.long, device=device) for i in self._owner_layers()},
            num_nonfinite=0, nonfinite_B=torch.zeros(0, dtype=torch.bool, device=device),
            clip_factors={k: empty.clone() for k in self.group_keys},
        )

    def _owner_layers(self) -> list[int]:
        return [info.index for info in self.layers]

    def _call(self, tape: Tape | None, mask_BT: torch.Tensor) -> _experts.ActiveCall:
        B = mask_BT.shape[0]
        token_mask_N = mask_BT.reshape(-1).bool()
        layers = {}
        for info in self.layers:
            layers[id(info.experts)] = _experts.LayerState(
                layer=info.index, num_experts=info.num_experts,
                mask_owners=self.grouping == "roles" and info.index in self.trained_layers,
                token_mask_N=token_mask_N, records=B,
            )
        return _experts.ActiveCall(tape=tape, layers=layers, owners={})

    def _find_tables(self) -> list[tuple[str, nn.Module]]:
        """Trainable relative-attention bias tables (the adapter's declared ``bias_table_attr``)."""
        attr = self.adapter.bias_table_attr
        if attr is None:
            return []
        out = []
        for name, module in self.model.named_modules():
            table = getattr(module, attr, None)
            if isinstance(table, nn.Embedding) and table.weight.requires_grad and hasattr(module, "compute_bias"):
                out.append((f"{name}.{attr}.weight", module))
        return out

    @contextlib.contextmanager
    def _installed(self, call: _experts.ActiveCall):
        """Select the recording dispatch for one call and restore everything afterwards."""
        token = _experts.ACTIVE.set(call)
        restore: list[Callable[[], None]] = []
        try:
            for info in self.layers:
                restore.extend(_experts.DISPATCH[info.dispatch](info, call.layers[id(info.experts)]))
            if call.tape is not None:
                for name, module in self._tables:
                    module.compute_bias = _table_compute_bias(module, name, call.tape)
                    restore.append(lambda m=module: delattr(m, "compute_bias"))
            yield
        finally:
            for fn in reversed(restore):
                fn()
            _experts.ACTIVE.reset(token)


class _Reducer:
    """Per-use norm work, done as each use's output gradient arrives during the backward.

    For each use it keeps only what the clipped sum will need, whichever is smaller: the rows
    (A, G; ghost norm now, ``(c * G)^T A`` later) or the per-record gradients (materialised now,
    A and G dropped). Parameters used more than once (tied weights) are materialised and summed
    per record before squaring, since ghost norms are not additive across uses.
    """

    def __init__(self, tape: Tape, params, num_groups: int, num_records: int, device):
        self.tape = tape
        self.params = params
        self.B = num_records
        self.norms2_GB = torch.zeros(num_groups, num_records, dtype=torch.float64, device=device)
        self._sq: dict[torch.dtype, tuple[list[int], list[torch.Tensor]]] = {}  # per-use [B] squared norms, by dtype
        self.items: list[tuple[str, tuple[str, int | None], int, object]] = []
        self.multi: dict[tuple[str, int | None], tuple[int, torch.Tensor]] = {}
        self.per: list[tuple[tuple[str, int | None], int, torch.Tensor]] = []  # materialised, norms not yet taken
        self._grouped_sq: dict[int, tuple[GroupedNorms, torch.Tensor]] = {}  # per shared row layout
        self._counts: Counter | None = None

    def _shape(self, use: Use) -> tuple[int, ...]:
        p = self.params[use.name]
        return tuple(p.shape[1:]) if use.slot is not None else tuple(p.shape)

    def on_ready(self, use: Use) -> None:
        if self._counts is None:  # the forward is complete once gradients flow
            self._counts = Counter((n, u.slot) for u in self.tape.uses for n in (u.slot_names or (u.name,)))
        key, B = (use.name, use.slot), self.B
        use.reduced = True
        if use.kind == "grouped":
            for n in use.slot_names or (use.name,):
                if self._counts[(n, None)] != 1:
                    raise UnsupportedModelError(f"expert weight {n!r} is used more than once per forward")
            gn = grouped_sq_norms(use, B)
            self._add_pairs(use, gn)
            if gn.per_pair is not None:
                use.a = use.g = None
            self.items.append(("grouped", key, -1, (use, gn)))
            return
        single = self._counts[key] == 1
        if single and use.kind in ("linear", "embedding") and keep_rows(use, B):
            self._add(use.group, ghost_sq_norm(use, B))
            self.items.append(("rows", key, use.group, use))
            return
        per = materialise(use, B, self._shape(use))
        use.a = use.g = use.per_record = None
        if single:
            self.per.append((key, use.group, per))  # norms at finish, batched (see _chunks)
        else:
            group, prev = self.multi.get(key, (use.group, None))
            self.multi[key] = (group, per if prev is None else prev + per)

    def _add_pairs(self, use: Use, gn: GroupedNorms) -> None:
        """Add a grouped use's per-pair squared norms; uses of one row layout (one MoE layer) have the
        same pairs, so their norms are summed first and scattered into ``norms2_GB`` once per layer."""
        layout = id(use.shared) if use.shared is not None else id(use)
        prev = self._grouped_sq.get(layout)
        if prev is not None and prev[0].pair_group is gn.pair_group and prev[0].pair_rec is gn.pair_rec:
            sq = prev[1] + gn.sq if prev[1].dtype == gn.sq.dtype else prev[1].double() + gn.sq.double()
            self._grouped_sq[layout] = (prev[0], sq)
            return
        if prev is not None:
            self._scatter_pairs(*prev)
        self._grouped_sq[layout] = (gn, gn.sq)

    def _scatter_pairs(self, gn: GroupedNorms, sq: torch.Tensor) -> None:
        self.norms2_GB.index_put_((gn.pair_group, gn.pair_rec), sq.to(torch.float64), accumulate=True)

    def _chunks(self) -> None:
        """The materialised per-record gradients of each group concatenated in chunks: one squared norm
        and (later) one weighted sum per chunk, instead of per use."""
        by_group: dict[int, list] = defaultdict(list)
        for key, group, per in self.per:
            by_group[group].append((key, per))
        self.per = []
        for group, entries in by_group.items():
            keys = [key for key, _ in entries]
            shapes = [tuple(per.shape[1:]) for _, per in entries]
            tensors = [per for _, per in entries]
            entries.clear()
            for index, flat in concat_records(tensors):
                self._add(group, sq_norms(flat))
                self.items.append(("chunk", [keys[i] for i in index], group, (flat, [shapes[i] for i in index])))

    def _add(self, group: int, sq_B: torch.Tensor) -> None:
        """Add one use's per-record squared norms to its group's (batched: see :meth:`_flush`)."""
        groups, values = self._sq.setdefault(sq_B.dtype, ([], []))
        groups.append(group)
        values.append(sq_B)

    def _flush(self) -> None:
        """Every pending use's squared norms into ``norms2_GB`` in float64, a few ops per dtype (not per use)."""
        for groups, values in self._sq.values():
            index = torch.tensor(groups, dtype=torch.long).to(self.norms2_GB.device, non_blocking=True)
            self.norms2_GB.index_add_(0, index, torch.stack(values).to(torch.float64))
        self._sq = {}

    def release(self) -> None:
        """Drop the tape's uses and whatever is still kept, once the call is over (or has failed).

        ``tape.on_ready`` is this reducer's bound method and the reducer holds the tape: a reference
        cycle, which Python frees only at its next cyclic garbage collection. Without this, every
        call's captured rows stayed allocated until then (about 17 MB per call of the medium top-1
        model at T = 32), and each following call's forward faulted fresh pages in.
        """
        self.tape.uses.clear()
        self.tape.on_ready = None
        self.items.clear()
        self.multi.clear()
        self.per.clear()
        self._grouped_sq = {}
        self._sq = {}

    def finish(self) -> torch.Tensor:
        for use in self.tape.uses:
            if not use.reduced and (use.g is not None or use.per_record is not None):
                raise AssertionError(f"internal error: a use of {use.name!r} received a gradient but was not reduced")
        for key, (group, per) in self.multi.items():
            self.per.append((key, group, per))
        self.multi = {}
        self._chunks()
        for gn, sq in self._grouped_sq.values():
            self._scatter_pairs(gn, sq)
        self._grouped_sq = {}
        self._flush()
        return self.norms2_GB


def _add_part(parts: dict, param: torch.Tensor, name: str, slot: int | None, contrib: torch.Tensor) -> None:
    """Add one use's clipped sum to its parameter's (or slot's) part."""
    if slot in parts[name]:
        contrib = contrib + parts[name][slot]
    parts[name][slot] = contrib.to(sum_dtype(param))


def _assemble(param: torch.Tensor, parts: dict[int | None, torch.Tensor]) -> torch.Tensor:
    """The full-shape clipped sum of one parameter from its whole-tensor or per-slot parts."""
    if None in parts:
        return parts[None].reshape(param.shape)
    if not parts:  # no record reached it: a read-only broadcast zero (no memory; in-place ops on it raise)
        return torch.zeros((), dtype=sum_dtype(param), device=param.device).expand(param.shape)
    zero = None
    slots = []
    for e in range(param.shape[0]):
        if e in parts:
            slots.append(parts[e])
        else:
            zero = torch.zeros(param.shape[1:], dtype=sum_dtype(param), device=param.device) if zero is None else zero
            slots.append(zero)
    return torch.stack(slots)


def _table_compute_bias(module: nn.Module, name: str, tape: Tape):
    """A per-record ``compute_bias`` for one T5-style attention instance (see :class:`TableFn`)."""

    def compute_bias(query_length, key_length, device=None, past_seen_tokens=0):
        weight = getattr(module, name.rsplit(".", 2)[-2]).weight  # the declared bias table
        device = weight.device if device is None else device
        context = torch.arange(query_length, dtype=torch.long, device=device)[:, None] + past_seen_tokens
        memory = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
        bucket = module._relative_position_bucket(
            memory - context, bidirectional=not module.is_decoder,
            num_buckets=module.relative_attention_num_buckets, max_distance=module.relative_attention_max_distance,
        )
        use = Use(name=name, slot=None, kind="table", group=tape.group(name, None), on_ready=tape.on_ready)
        tape.uses.append(use)
        return TableFn.apply(bucket, weight, tape.num_records, use)

    return compute_bias
