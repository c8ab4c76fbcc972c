"""The slow, obviously-correct oracle for :class:`raptor.per_sample.engine.PerRecordEngine`.

One record at a time (a batch of one, same padding), the model's own forward (its default experts
implementation, no capture), plain ``torch.autograd.grad`` on that record's loss, then:

* owners read from the routing the forward actually used, with a plain Python loop (forward hooks
  on the experts modules for top-k families, on the router for Switch);
* ``grouping="roles"``: the gradient slices of non-owner experts in trained layers are zeroed;
  everything else (shared parameters get every path, non-owner experts included) is what
  autograd gives;
* exact per-group norms, ``c = min(1, C / norm)`` (1 at norm 0), records with a non-finite norm
  contribute nothing and are counted.

Privacy: a test oracle; it releases nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn

from raptor.errors import ConfigError
from raptor.moe.adapters import get_adapter
from raptor.moe.expert_lora import has_expert_lora
from raptor.per_sample.engine import EngineResult, _batch_parts, cross_entropy_per_record, model_inputs
from raptor.roles.groups import GroupKey, build_group_map


def _owner_topk_loop(index_NK: torch.Tensor, weights_NK: torch.Tensor, mask_N: torch.Tensor, E: int) -> int:
    scores = [0.0] * E
    for t in range(index_NK.shape[0]):
        if not bool(mask_N[t]):
            continue
        for j in range(index_NK.shape[1]):
            scores[int(index_NK[t, j])] += float(weights_NK[t, j].detach())
    best = 0
    for e in range(1, E):
        if scores[e] > scores[best]:
            best = e
    return best


def _owner_top1_loop(choice_N: torch.Tensor, mask_N: torch.Tensor, E: int) -> int:
    counts = [0] * E
    for t in range(choice_N.shape[0]):
        if bool(mask_N[t]):
            counts[int(choice_N[t])] += 1
    best = 0
    for e in range(1, E):
        if counts[e] > counts[best]:
            best = e
    return best


def reference_compute(
    model: nn.Module,
    batch: Mapping[str, torch.Tensor],
    clip_norms: Mapping[GroupKey | str, float],
    trained_layers: Sequence[int],
    grouping: str,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = cross_entropy_per_record,
    head_params: Sequence[str] = (),
) -> EngineResult:
    """Per-record norms and clipped sums, one record at a time with plain autograd (``head_params``:
    the shared stream's ``head`` group, as the engine's).

    Longer than raptor's 80-line rule on purpose: this is the oracle every fast path is checked
    against, written as one loop over records to be read top to bottom and checked by eye; helpers
    would hide which gradient goes to which group."""
    ids, mask, labels = _batch_parts(batch)
    adapter = get_adapter(model)
    adapter.prepare(model)
    layers = adapter.moe_layers(model)
    gmap = build_group_map(model, [i.expert_params() for i in layers], trained_layers=trained_layers,
                           grouping=grouping, head_params=head_params)
    clip = {(GroupKey.parse(k) if isinstance(k, str) else k): float(v) for k, v in clip_norms.items()}
    for key in gmap.keys:
        if key not in clip:
            raise ConfigError(f"clip_norms has no entry for group {key}")
    names = list(gmap.params)
    params = [gmap.params[n] for n in names]
    B = ids.shape[0]
    sums = {n: torch.zeros_like(p) for n, p in gmap.params.items()}
    norms = {k: torch.zeros(B, dtype=torch.float64) for k in gmap.keys}
    factors = {k: torch.zeros(B, dtype=torch.float64) for k in gmap.keys}
    owners = {info.index: torch.zeros(B, dtype=torch.long) for info in layers}
    losses = torch.zeros(B, dtype=torch.float64)
    nonfinite = torch.zeros(B, dtype=torch.bool)
    trained = set(int(x) for x in trained_layers) if grouping == "roles" else set()

    def _loop() -> None:
        for r in range(B):
            mask_r = mask[r:r + 1]
            seen: dict[int, int] = {}
            handles = []
            for info in layers:
                if info.fused:
                    def hook(module, args, output, info=info, seen=seen, mask_r=mask_r):
                        seen[info.index] = _owner_topk_loop(args[1], args[2], mask_r.reshape(-1), info.num_experts)
                    handles.append(info.experts.register_forward_hook(hook))
                else:
                    def hook(module, args, output, info=info, seen=seen, mask_r=mask_r):
                        choice = output[2].detach().argmax(dim=-1).reshape(-1)
                        seen[info.index] = _owner_top1_loop(choice, mask_r.reshape(-1), info.num_experts)
                    handles.append(info.router.register_forward_hook(hook))
            try:
                logits = model(**{k: v[r:r + 1] for k, v in model_inputs(batch).items()}).logits
            finally:
                for h in handles:
                    h.remove()
            loss = loss_fn(logits, labels[r:r + 1])
            losses[r] = float(loss.detach()[0])
            grads = torch.autograd.grad(loss.sum(), params, allow_unused=True)
            grad = {n: (torch.zeros_like(p) if g is None else g.detach().clone())
                    for n, p, g in zip(names, params, grads, strict=True)}
            for layer, owner in seen.items():
                owners[layer][r] = owner
            # Drop the record's gradient to non-owner experts of trained layers.
            for key, slices in gmap.groups.items():
                if key.is_expert and key.layer in trained and key.expert_id != seen[key.layer]:
                    for s in slices:
                        if s.index is None:
                            grad[s.name].zero_()
                        else:
                            grad[s.name][s.index].zero_()
            per_group = {}
            for key, slices in gmap.groups.items():
                total = torch.zeros((), dtype=torch.float64)
                for s in slices:
                    g = grad[s.name] if s.index is None else grad[s.name][s.index]
                    total = total + g.to(torch.float64).pow(2).sum()
                per_group[key] = total.sqrt()
            finite = all(bool(torch.isfinite(v)) for v in per_group.values())
            for key, value in per_group.items():
                norms[key][r] = value
            if not finite:
                nonfinite[r] = True
                continue
            for key, slices in gmap.groups.items():
                n_ = float(per_group[key])
                c = min(1.0, clip[key] / n_) if n_ > 0 else 1.0
                factors[key][r] = c
                for s in slices:
                    if s.index is None:
                        sums[s.name] += c * grad[s.name]
                    else:
                        sums[s.name][s.index] += c * grad[s.name][s.index]

    # The library's own per-expert loop ("eager") is the plain path for fused experts; experts with
    # raptor's per-expert LoRA keep their plain implementation (raptor.moe.expert_lora), since the
    # library's loop does not know the LoRA factors. The implementation is a field of the (model-wide)
    # config: a config shared with any LoRA-carrying layer keeps raptor's LoRA loop, which runs a layer
    # without LoRA factors as plain experts.
    lora_configs = {id(i.experts.config) for i in layers if i.fused and has_expert_lora(i.experts)}
    configs = {id(i.experts.config): i.experts.config for i in layers
               if i.fused and id(i.experts.config) not in lora_configs}
    saved = {k: c._experts_implementation_internal for k, c in configs.items()}
    for c in configs.values():
        c._experts_implementation_internal = "eager"
    try:
        _loop()
    finally:
        for k, c in configs.items():
            c._experts_implementation_internal = saved[k]
    return EngineResult(loss_B=losses, norms=norms, clipped_sums=sums, owners=owners,
                        num_nonfinite=int(nonfinite.sum()), nonfinite_B=nonfinite, clip_factors=factors)
