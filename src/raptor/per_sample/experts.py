"""Expert dispatch hooks for the per-record engine, without patching any transformers source.

* Fused 3-D experts (OLMoE, Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3): :func:`raptor_experts_forward`
  is registered as the ``"raptor"`` implementation of ``transformers.integrations.moe.
  ExpertsInterface``; the engine selects it by setting the experts config's
  ``_experts_implementation`` for the duration of one ``compute`` and restores it after. Outside
  an engine call it computes the plain (grouped-mm) forward.
* ``ModuleDict`` experts with a top-1 router (Switch): :func:`module_dict_experts_forward` replaces the ``forward`` of the
  experts *instance* during one ``compute`` and computes every expert of the layer as grouped
  uses, like the fused families: one for ``wi`` and one for ``wo`` over all E experts' weights
  (and, with PEFT LoRA on ``wi``/``wo``, one per LoRA factor), never one use or one module call
  per expert. Each expert must be the library's ``wi -> act -> dropout(p=0) -> wo`` block (plain
  ``nn.Linear`` without bias, or a PEFT LoRA ``Linear`` around one); anything else raises.
  :func:`top1_router_hook` reads the owners from the router.

:data:`DISPATCH` maps an adapter's declared ``dispatch`` to the function that installs it for one
engine call; the engine only looks the layer's kind up there.

Both compute the owner of every record in their layer from the routing actually used (see
:mod:`raptor.roles.owners`) before dispatching, and, under roles grouping, mark the rows of
(token, expert) pairs whose record is not owned by that expert so that they are dropped from the
expert parameters' gradients (they still carry the record's gradient to the shared parameters).

Legend: N tokens (B x T, record-major), K top-k slots, D hidden, E experts.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field

import torch
from transformers.integrations.moe import (
    ExpertsInterface,
    batched_mm_experts_forward,
    grouped_mm_experts_forward,
)

from raptor.errors import UnsupportedModelError
from raptor.moe.expert_lora import expert_lora_forward, has_expert_lora
from raptor.per_sample.capture import GroupedLinearFn, Offsets, Tape, grouped_kernel_runs, grouped_linear_use
from raptor.roles.owners import owners_from_top1, owners_from_topk

IMPLEMENTATION = "raptor"


@dataclass
class LayerState:
    """What the dispatch hooks need to know about one MoE layer during one engine call."""

    layer: int
    num_experts: int
    mask_owners: bool  # roles grouping and a trained layer
    token_mask_N: torch.Tensor
    records: int


@dataclass
class ActiveCall:
    tape: Tape | None  # None: routing only (``engine.route``)
    layers: dict[int, LayerState]  # id(experts module) -> state
    owners: dict[int, torch.Tensor]


ACTIVE: contextvars.ContextVar[ActiveCall | None] = contextvars.ContextVar("raptor_active_call", default=None)


def raptor_experts_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                           top_k_weights: torch.Tensor) -> torch.Tensor:
    """Fused experts forward that records per-expert uses of ``gate_up_proj`` / ``down_proj``.

    With raptor's per-expert LoRA factors (``{gate_up,down}_proj_lora_{A,B}``, see
    :mod:`raptor.moe.expert_lora`) each projection is ``x W[e]^T + s (x A[e]^T) B[e]^T``; outside an
    engine call the plain :func:`raptor.moe.expert_lora.expert_lora_forward` runs instead.
    """
    call = ACTIVE.get()
    state = None if call is None else call.layers.get(id(self))
    lora = has_expert_lora(self)
    if state is None and lora:
        return expert_lora_forward(self, hidden_states, top_k_index, top_k_weights)
    if state is None:  # HF's grouped kernel only where the probe found it right on this device and dtype
        if not grouped_kernel_runs(hidden_states.device, hidden_states.dtype):
            return batched_mm_experts_forward(self, hidden_states, top_k_index, top_k_weights)
        return grouped_mm_experts_forward(self, hidden_states, top_k_index, top_k_weights)
    with _uncaptured():
        return _recorded_experts_forward(self, call, state, lora, hidden_states, top_k_index, top_k_weights)


def _recorded_experts_forward(self, call: ActiveCall, state: LayerState, lora: bool, hidden_states: torch.Tensor,
                              top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
    """The engine's fused experts forward (see :func:`raptor_experts_forward`)."""
    if self.has_bias or not self.has_gate or self.is_transposed or not self.is_concatenated \
            or self.has_post_expert_norm or self._is_expert_parallel:
        raise UnsupportedModelError(
            f"{type(self).__name__}: the engine supports concatenated gate_up/down experts without bias, "
            "transposition, post-norm or expert parallelism"
        )
    hidden_ND = hidden_states
    N = hidden_ND.shape[0]
    K = top_k_index.shape[1]
    E = self.num_experts
    keep = None
    # Sort the (token, slot) pairs by expert; the stable sort keeps tokens (so records) ascending.
    # Every index is an expert of this layer (expert parallelism, whose sentinels are not, is refused above).
    expert_S, perm = torch.sort(top_k_index.reshape(-1), stable=True)
    tok_S = perm // K
    offs = Offsets.of(expert_S, E)
    B = state.records
    T = N // B if B else 0
    if B * T != N:
        raise UnsupportedModelError(f"experts got {N} tokens, not a multiple of the batch size {B}")
    owner_B = owners_from_topk(top_k_index, top_k_weights, state.token_mask_N, num_records=B,
                               num_experts=state.num_experts)
    call.owners[state.layer] = owner_B
    tape, layer = call.tape, state.layer
    rec_S = tok_S // max(T, 1)
    if state.mask_owners:
        keep = torch.nonzero(owner_B.index_select(0, rec_S) == expert_S, as_tuple=False).squeeze(1)
    shared: dict = {}  # the layer's uses share their rows' layout (see grouped_linear_use)

    def project(x_S: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if tape is not None and tape.name_of(weight) is not None:
            return grouped_linear_use(tape, x_S, weight, offs, rec_S, expert_S, keep, layer, shared)
        if weight.requires_grad and torch.is_grad_enabled():
            raise UnsupportedModelError(f"MoE layer {layer}: expert weight of shape {tuple(weight.shape)} is "
                                        "trainable but not recorded by the engine; freeze it or train its layer")
        return GroupedLinearFn.apply(x_S, offs, None, weight)

    def projection(x_S: torch.Tensor, name: str) -> torch.Tensor:
        out = project(x_S, getattr(self, name))
        if lora:
            z = project(x_S, getattr(self, f"{name}_lora_A"))
            out = out + self.raptor_lora_scaling * project(z, getattr(self, f"{name}_lora_B"))
        return out

    x_S = hidden_ND.index_select(0, tok_S)
    h = self._apply_gate(projection(x_S, "gate_up_proj"))
    y = projection(h, "down_proj")
    w_S = top_k_weights.reshape(-1).index_select(0, perm)
    y = y * w_S.unsqueeze(-1).to(y.dtype)
    return torch.zeros_like(hidden_ND).index_add(0, tok_S, y.to(hidden_ND.dtype))


def _uncaptured():
    """The capture mode off for the body of an expert dispatch (``torch._C.DisableTorchFunction``).

    A dispatch records its expert weights itself, as grouped uses, so none of its ops needs the
    capture mode's interception; under the mode every op of it (index, sort, per-expert ``mm``
    slices: about 1,300 ops per forward of the medium Switch model) pays a Python call, which is
    most of the private forward's overhead at short sequences. Nothing goes unchecked: a trainable
    parameter that an op of the dispatch used outside a recorded use would receive a ``.grad`` in
    the backward, which :meth:`raptor.per_sample.engine.PerRecordEngine.compute` refuses.
    """
    return torch._C.DisableTorchFunction()


def module_dict_experts_forward(module, state: LayerState):
    """A replacement ``forward`` for one ModuleDict (Switch) experts instance (bound via closure).

    Rows are the routed (token, expert) pairs sorted by expert, then token (so by record within an
    expert); tokens dropped by the per-sequence capacity have no row, as in the library's loop.
    ``wi`` and ``wo`` are each one grouped use over the E experts' weights.
    """
    experts = [module[f"expert_{e}"] for e in range(state.num_experts)]
    wi = [_switch_projection(x.wi, state.layer, "wi", getattr(x, "wi_bias", None)) for x in experts]
    wo = [_switch_projection(x.wo, state.layer, "wo", getattr(x, "wo_bias", None)) for x in experts]
    act = _one_of([x.act for x in experts], type, state.layer, "act")
    for x in experts:
        if isinstance(x.dropout, torch.nn.Dropout) and x.dropout.p != 0.0 and x.dropout.training:
            raise UnsupportedModelError(f"MoE layer {state.layer}: expert dropout must be off (p = 0) in the engine")
    wo_dtype = wo[0].base.dtype

    def forward(hidden_states: torch.Tensor, selected_experts: torch.Tensor, routing_weights: torch.Tensor):
        with _uncaptured():
            return dispatch(hidden_states, selected_experts, routing_weights)

    def dispatch(hidden_states: torch.Tensor, selected_experts: torch.Tensor, routing_weights: torch.Tensor):
        call = ACTIVE.get()
        tape = call.tape
        N = hidden_states.shape[0]
        B = state.records
        T = N // B if B else 0
        E = state.num_experts
        pairs = torch.nonzero(selected_experts.reshape(N, -1).t(), as_tuple=False)  # [S, 2] sorted (expert, token)
        expert_S, tok_S = pairs[:, 0], pairs[:, 1]
        offs = Offsets.of(expert_S, E)
        rec_S = tok_S // max(T, 1)
        keep = None
        if state.mask_owners:
            owner_B = call.owners[state.layer]
            keep = torch.nonzero(owner_B.index_select(0, rec_S) == expert_S, as_tuple=False).squeeze(1)
        rows = _Rows(tape, offs, rec_S, expert_S, keep, state.layer)
        h = act(rows.project(hidden_states.index_select(0, tok_S), wi))
        if h.dtype != wo_dtype and wo_dtype != torch.int8:
            h = h.to(wo_dtype)
        y = rows.project(h, wo)
        y = y * routing_weights.reshape(N, -1)[:, 0].index_select(0, tok_S).unsqueeze(-1).to(y.dtype)
        return torch.zeros_like(hidden_states).index_add(0, tok_S, y.to(hidden_states.dtype))

    return forward


@dataclass(frozen=True)
class _Projection:
    """One expert's ``Linear`` (bias-free), optionally with one active PEFT LoRA adapter."""

    base: torch.Tensor  # [d_out, d_in]
    lora_A: torch.Tensor | None = None  # [r, d_in]
    lora_B: torch.Tensor | None = None  # [d_out, r]
    scaling: float = 1.0
    bias: torch.Tensor | None = None  # [d_out, 1]: the expert's bias (bert_moe), a grouped use on ones


def _switch_projection(linear: torch.nn.Module, layer: int, attr: str,
                       bias: torch.Tensor | None = None) -> _Projection:
    """One expert projection; ``bias``: the expert module's 2-D ``{attr}_bias`` ``[d_out, 1]`` if it has one."""
    where = f"MoE layer {layer}: expert {attr} ({type(linear).__name__})"
    if bias is not None and (bias.ndim != 2 or bias.shape[1] != 1):
        raise UnsupportedModelError(f"{where}: its bias must be a [d_out, 1] parameter, got {tuple(bias.shape)}")
    if isinstance(linear, torch.nn.Linear) and type(linear).forward is torch.nn.Linear.forward:
        if linear.bias is not None:
            raise UnsupportedModelError(f"{where} has a bias; the engine's Switch dispatch expects bias-free experts")
        return _Projection(linear.weight, bias=bias)
    base = getattr(linear, "base_layer", None)
    lora_A, lora_B = getattr(linear, "lora_A", None), getattr(linear, "lora_B", None)
    if not (isinstance(base, torch.nn.Linear) and isinstance(lora_A, torch.nn.ModuleDict)
            and isinstance(lora_B, torch.nn.ModuleDict)):
        raise UnsupportedModelError(f"{where} is neither an nn.Linear nor a PEFT LoRA Linear")
    active = [a for a in linear.active_adapters if a in lora_A]
    if linear.disable_adapters or linear.merged or len(active) != 1 or active[0] in getattr(linear, "lora_variant", {}):
        raise UnsupportedModelError(f"{where}: the engine supports exactly one active, unmerged, plain LoRA adapter")
    name = active[0]
    dropout = linear.lora_dropout[name]
    if base.bias is not None or lora_A[name].bias is not None or lora_B[name].bias is not None or (
            isinstance(dropout, torch.nn.Dropout) and dropout.p != 0.0):
        raise UnsupportedModelError(f"{where}: LoRA with a bias or dropout is not supported by the engine")
    return _Projection(base.weight, lora_A[name].weight, lora_B[name].weight, float(linear.scaling[name]), bias)


def _one_of(values: list, key, layer: int, what: str):
    if len({key(v) for v in values}) != 1:
        raise UnsupportedModelError(f"MoE layer {layer}: the experts' {what} differ; the engine needs them alike")
    return values[0]


@dataclass
class _Rows:
    """Rows of one Switch layer's dispatch, and how to project them with every expert's weight at once."""

    tape: Tape | None
    offs: Offsets
    rec_S: torch.Tensor
    expert_S: torch.Tensor
    keep: torch.Tensor | None
    layer: int
    shared: dict = field(default_factory=dict)  # the layer's uses share their rows' layout (see grouped_linear_use)

    def grouped(self, x_S: torch.Tensor, weights: list[torch.Tensor]) -> torch.Tensor:
        if self.tape is not None and any(self.tape.name_of(w) is not None for w in weights):
            return grouped_linear_use(self.tape, x_S, weights, self.offs, self.rec_S, self.expert_S, self.keep,
                                      self.layer, self.shared)
        return GroupedLinearFn.apply(x_S, self.offs, None, *weights)

    def project(self, x_S: torch.Tensor, slots: list[_Projection]) -> torch.Tensor:
        """``x W_e^T`` (+ ``s (x A_e^T) B_e^T`` under LoRA, in PEFT's order and dtypes) (+ ``b_e``) on every row."""
        out = self.grouped(x_S, [p.base for p in slots])
        if slots[0].lora_A is not None:
            out = self._lora(x_S, slots, out)
        if len({p.bias is None for p in slots}) != 1:
            raise UnsupportedModelError(f"MoE layer {self.layer}: some experts' projections have a bias, others not")
        if slots[0].bias is not None:  # the bias as a grouped linear use on a column of ones: sum_t g_t per record
            ones = torch.ones(x_S.shape[0], 1, dtype=x_S.dtype, device=x_S.device)
            out = out + self.grouped(ones, [p.bias for p in slots]).to(out.dtype)
        return out

    def _lora(self, x_S: torch.Tensor, slots: list[_Projection], out: torch.Tensor) -> torch.Tensor:
        if any(p.lora_A is None for p in slots):
            raise UnsupportedModelError(f"MoE layer {self.layer}: LoRA is on some experts' projections only")
        scaling = _one_of([p.scaling for p in slots], float, self.layer, "LoRA scalings")
        z = self.grouped(x_S.to(slots[0].lora_A.dtype), [p.lora_A for p in slots])
        return (out + self.grouped(z, [p.lora_B for p in slots]) * scaling).to(out.dtype)


def top1_router_hook(state: LayerState):
    """Forward hook on a top-1 router (``output[2]`` = router logits): owner = most frequent top-1
    choice over non-pad tokens."""

    def hook(module, args, output):
        call = ACTIVE.get()
        if call is None:
            return None
        router_logits = output[2]
        choice_N = router_logits.detach().argmax(dim=-1).reshape(-1)
        call.owners[state.layer] = owners_from_top1(choice_N, state.token_mask_N, num_records=state.records,
                                                    num_experts=state.num_experts)
        return None

    return hook


def install_fused(info, state: LayerState) -> list:
    """Select the recording ExpertsInterface implementation for one call; returns the undo steps."""
    cfg = info.experts.config
    old = cfg._experts_implementation_internal
    cfg._experts_implementation_internal = IMPLEMENTATION
    return [lambda: setattr(cfg, "_experts_implementation_internal", old)]


def install_module_dict(info, state: LayerState) -> list:
    """Replace the experts instance's forward and hook the top-1 router for one call; returns the undo steps."""
    info.experts.forward = module_dict_experts_forward(info.experts, state)
    handle = info.router.register_forward_hook(top1_router_hook(state))
    return [lambda m=info.experts: delattr(m, "forward"), handle.remove]


#: adapter ``dispatch`` -> installer(layer info, layer state) -> list of undo callables
DISPATCH = {"fused": install_fused, "module_dict": install_module_dict}

ExpertsInterface.register(IMPLEMENTATION, raptor_experts_forward)
