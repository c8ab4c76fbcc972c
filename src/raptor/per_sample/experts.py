"""Expert dispatch hooks for the per-record engine, without patching any transformers source.

* Fused 3-D experts (OLMoE, Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3): :func:`raptor_experts_forward`
  is registered as the ``"raptor"`` implementation of ``transformers.integrations.moe.
  ExpertsInterface``; the engine selects it by setting the experts config's
  ``_experts_implementation`` for the duration of one ``compute`` and restores it after. Outside
  an engine call it computes the plain (grouped-mm) forward.
* ``ModuleDict`` experts with a top-1 router (Switch): :func:`module_dict_experts_forward` replaces
  the ``forward`` of the experts *instance* during one ``compute``; each expert's own module
  forward still runs, so LoRA-wrapped expert Linear layers work; a row context tells the capture
  which records the rows are. :func:`top1_router_hook` reads the owners from the router.

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
from dataclasses import dataclass

import torch
from transformers.integrations.moe import (
    ExpertsInterface,
    batched_mm_experts_forward,
    grouped_mm_experts_forward,
)

from raptor.errors import UnsupportedModelError
from raptor.moe.expert_lora import expert_lora_forward, has_expert_lora
from raptor.per_sample.capture import RowContext, Tape, grouped_linear_use
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


def _expert_rows(select_NE: torch.Tensor, e: int) -> torch.Tensor:
    return torch.nonzero(select_NE[:, e], as_tuple=False).squeeze(1)


def _context(state: LayerState, owner_B: torch.Tensor, tok: torch.Tensor, e: int, T: int) -> RowContext:
    rec = tok // max(T, 1)
    keep = None
    if state.mask_owners:
        keep = torch.nonzero(owner_B.index_select(0, rec) == e, as_tuple=False).squeeze(1)
    return RowContext(rec=rec, layer=state.layer, expert=e, keep=keep)


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
    if state is None:
        if hidden_states.dtype == torch.float64:
            return batched_mm_experts_forward(self, hidden_states, top_k_index, top_k_weights)
        return grouped_mm_experts_forward(self, hidden_states, top_k_index, top_k_weights)
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
    tape, keep, layer = None, None, -1
    # Sort the (token, slot) pairs by expert; the stable sort keeps tokens (so records) ascending.
    expert_S, perm = torch.sort(top_k_index.reshape(-1), stable=True)
    valid = (expert_S >= 0) & (expert_S < E)
    if not bool(valid.all()):
        expert_S, perm = expert_S[valid], perm[valid]
    tok_S = perm // K
    counts = torch.bincount(expert_S, minlength=E).tolist()
    rec_S = tok_S
    if state is not None:
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

    def project(x_S: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if tape is not None and tape.name_of(weight) is not None:
            return grouped_linear_use(tape, x_S, weight, counts, rec_S, expert_S, keep, layer)
        return _plain_grouped(x_S, weight, counts)

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


def _plain_grouped(x_S: torch.Tensor, weight: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """Per-expert ``x @ W[e]^T`` over rows sorted by expert (frozen weights: plain autograd)."""
    parts, start = [], 0
    for e, n in enumerate(counts):
        if n:
            parts.append(torch.nn.functional.linear(x_S[start:start + n], weight[e]))
        start += n
    if not parts:
        return x_S.new_zeros((0, weight.shape[1]))
    return torch.cat(parts)


def module_dict_experts_forward(module, state: LayerState):
    """A replacement ``forward`` for one ModuleDict experts instance (bound via closure)."""

    def forward(hidden_states: torch.Tensor, selected_experts: torch.Tensor, routing_weights: torch.Tensor):
        call = ACTIVE.get()
        owner_B = call.owners[state.layer]
        tape = call.tape
        N = hidden_states.shape[0]
        B = state.records
        T = N // B if B else 0
        select_NE = selected_experts.reshape(N, -1)
        out_ND = torch.zeros_like(hidden_states)
        for e in range(select_NE.shape[1]):
            tok = _expert_rows(select_NE, e)
            if tok.numel() == 0:
                continue
            ctx = _context(state, owner_B, tok, e, T)
            if tape is not None:
                tape.contexts.append(ctx)
            try:
                y = module[f"expert_{e}"](hidden_states.index_select(0, tok))
            finally:
                if tape is not None:
                    tape.contexts.pop()
            y = y * routing_weights.index_select(0, tok).reshape(-1, 1).to(y.dtype)
            out_ND.index_add_(0, tok, y.to(out_ND.dtype))  # in place, as the library does
        return out_ND

    return forward


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
