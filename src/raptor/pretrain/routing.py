"""Router capture for public pre-training: load-balancing / z-losses and routing statistics.

:class:`RouterCapture` puts a forward hook on every MoE layer's router (found by the family's
adapter) and keeps, per layer, the router logits ``[N, E]`` and the chosen experts ``[N, K]``:

* Switch's router returns ``(expert_index, router_probs, router_logits)``: logits at index 2,
  the choice is their argmax (top-1);
* the fused families' routers return ``(router_logits, top_k_weights, top_k_index)``.

Two uses:

* :func:`router_losses`: the load-balancing loss of Switch (Fedus et al. 2021, eq. 4; the same
  formula OLMoE and Mixtral use with top-k counts), ``E * sum_e f_e P_e``, with ``f_e`` the share
  of token-to-expert assignments and ``P_e`` the mean router probability, and the router z-loss
  of ST-MoE (Zoph et al. 2022), ``mean_t logsumexp(logits_t)^2``, both over the batch's tokens.
  They couple the records of a batch, which is fine here only because the pre-training text is
  public; private fine-tuning keeps them off (``MoEAdapter.prepare``).
* :func:`routing_statistics`: per layer, the expert load shares (token assignments), their
  entropy, the mean per-token router entropy, the mutual information between token and expert
  (entropy of the mean routing distribution minus the mean per-token entropy: high when routing
  is balanced AND depends on the token), and the record-level owner shares RAPTOR uses.

Legend: N tokens (record-major), E experts, K top-k, B records, T tokens per record.

Privacy: statistics are computed on the texts passed in; callers pass public text only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from raptor.moe.adapters import get_adapter
from raptor.roles.owners import owners_from_top1, owners_from_topk


@dataclass
class LayerRouting:
    logits_NE: torch.Tensor
    index_NK: torch.Tensor
    weights_NK: torch.Tensor


@dataclass
class RouterCapture:
    """Forward hooks on every router; ``layers[index]`` holds the last forward's routing."""

    model: nn.Module
    detach: bool = False
    layers: dict[int, LayerRouting] = field(default_factory=dict)

    def __post_init__(self) -> None:
        adapter = get_adapter(self.model)
        self.top1 = adapter.top1
        self.infos = adapter.moe_layers(self.model)
        self._handles = [info.router.register_forward_hook(self._hook(info.index, info.num_experts))
                         for info in self.infos]

    def _hook(self, index: int, num_experts: int):
        def hook(module, args, output):
            if self.top1:
                logits = output[2].reshape(-1, num_experts)
                choice = logits.detach().argmax(dim=-1, keepdim=True)
                weights = torch.ones_like(choice, dtype=logits.dtype)
            else:
                logits = output[0].reshape(-1, num_experts)
                choice = output[2].reshape(logits.shape[0], -1).detach()
                weights = output[1].reshape(logits.shape[0], -1).detach()
            if self.detach:
                logits = logits.detach()
            self.layers[index] = LayerRouting(logits, choice, weights)
        return hook

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def __enter__(self) -> RouterCapture:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def router_losses(capture: RouterCapture, token_mask_N: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(load-balancing loss, z-loss), each averaged over the MoE layers, on the valid tokens."""
    mask = token_mask_N.reshape(-1).bool()
    lb, z = [], []
    for layer in capture.layers.values():
        mask = mask.to(layer.logits_NE.device)
        logits = layer.logits_NE[mask].float()
        E = logits.shape[1]
        probs = logits.softmax(dim=-1)
        counts = torch.zeros(E, dtype=torch.float32, device=logits.device)
        counts.index_add_(0, layer.index_NK[mask].reshape(-1),
                          torch.ones(layer.index_NK[mask].numel(), device=logits.device))
        f_E = counts / counts.sum().clamp(min=1.0)
        lb.append(E * (f_E * probs.mean(dim=0)).sum())
        z.append(torch.logsumexp(logits, dim=-1).pow(2).mean())
    return torch.stack(lb).mean(), torch.stack(z).mean()


@dataclass
class _Acc:
    num_experts: int
    counts: torch.Tensor
    prob_sum: torch.Tensor
    token_entropy_sum: float = 0.0
    tokens: int = 0
    owners: list = field(default_factory=list)
    joint: dict = field(default_factory=dict)  # token id -> top-1 expert counts (E,)


def _entropy(p: torch.Tensor) -> float:
    p = p[p > 0]
    return float(-(p * p.log()).sum())


def _on_cpu(layer):
    """A captured layer's tensors on the CPU (a shallow copy; the capture keeps its own)."""
    import copy

    out = copy.copy(layer)
    for name, value in vars(layer).items():
        if isinstance(value, torch.Tensor):
            setattr(out, name, value.cpu())
    return out


@torch.no_grad()
def routing_statistics(model: nn.Module, input_ids_BT: torch.Tensor, attention_mask_BT: torch.Tensor, *,
                       batch_size: int = 64) -> dict[str, dict]:
    """Per-layer routing statistics of the given (public) records; keys are layer indices as strings.

    Runs the model's backbone in eval mode with natural routing. Entropies in nats.
    """
    was_training = model.training
    model.eval()
    accs: dict[int, _Acc] = {}
    with RouterCapture(model, detach=True) as cap:
        for start in range(0, input_ids_BT.shape[0], batch_size):
            ids = input_ids_BT[start:start + batch_size].cpu()
            mask = attention_mask_BT[start:start + batch_size].cpu()
            device = next(model.parameters()).device
            _backbone(model, ids.to(device), mask.to(device))
            mask_N = mask.reshape(-1).bool()
            for info in cap.infos:
                layer = _on_cpu(cap.layers[info.index])  # the statistics are accumulated on the CPU
                E = info.num_experts
                acc = accs.setdefault(info.index, _Acc(E, torch.zeros(E, dtype=torch.float64),
                                                       torch.zeros(E, dtype=torch.float64)))
                probs = layer.logits_NE[mask_N].double().softmax(dim=-1)
                acc.counts += torch.bincount(layer.index_NK[mask_N].reshape(-1), minlength=E).double()
                acc.prob_sum += probs.sum(dim=0)
                acc.token_entropy_sum += float(-(probs * probs.clamp(min=1e-300).log()).sum())
                acc.tokens += int(mask_N.sum())
                _count_joint(acc.joint, ids.reshape(-1)[mask_N], layer.index_NK[mask_N, 0], E)
                if cap.top1:
                    owners = owners_from_top1(layer.index_NK[:, 0], mask.reshape(-1), num_records=ids.shape[0],
                                              num_experts=E)
                else:
                    owners = owners_from_topk(layer.index_NK, layer.weights_NK, mask.reshape(-1),
                                              num_records=ids.shape[0], num_experts=E)
                acc.owners.append(owners)
    model.train(was_training)
    out = {}
    for index, acc in sorted(accs.items()):
        E = acc.num_experts
        load = acc.counts / acc.counts.sum().clamp(min=1.0)
        mean_prob = acc.prob_sum / max(acc.tokens, 1)
        token_h = acc.token_entropy_sum / max(acc.tokens, 1)
        owners = torch.cat(acc.owners)
        owner_shares = torch.bincount(owners, minlength=E).double() / max(owners.numel(), 1)
        out[str(index)] = {
            "num_experts": E,
            "tokens": acc.tokens,
            "records": int(owners.numel()),
            "load_shares": [round(float(v), 5) for v in load],
            "load_entropy": _entropy(load),
            "load_entropy_ratio": _entropy(load) / math.log(E),
            "mean_token_router_entropy": token_h,
            "token_expert_mutual_information": _entropy(mean_prob) - token_h,
            "owner_shares": [round(float(v), 5) for v in owner_shares],
            "owner_entropy": _entropy(owner_shares),
            **_hard_token_mi(acc.joint, E),
        }
    return out


def _count_joint(joint: dict, token_N: torch.Tensor, expert_N: torch.Tensor, num_experts: int) -> None:
    pair = token_N.long() * num_experts + expert_N.long()
    uniq, counts = torch.unique(pair, return_counts=True)
    for key, c in zip(uniq.tolist(), counts.tolist()):
        row = joint.setdefault(key // num_experts, [0] * num_experts)
        row[key % num_experts] += c


def _hard_token_mi(joint: dict, num_experts: int) -> dict[str, float]:
    """Mutual information between the input token id and its top-1 expert, in nats.

    The soft measure above (entropy of the mean router distribution minus the mean per-token
    entropy) is near zero whenever router probabilities are flat, even when the arg-max choice is
    a sharp function of the token. This one uses the choices actually made: I(V; E) = H(E) -
    H(E | V), from the (token id x expert) count table. The plug-in estimate is biased upward by
    about (cells - rows - cols + 1) / (2N) (Miller-Madow); ``..._corrected`` subtracts it, so that
    routing independent of the token reads about 0. ``top1_modal_share`` is the share of tokens
    sent to their token id's most frequent expert (1/E for random routing, 1 for a fixed
    token-to-expert map).
    """
    if not joint:
        return {"top1_token_mutual_information": 0.0, "top1_token_mutual_information_corrected": 0.0,
                "top1_modal_share": 0.0}
    table = torch.tensor(list(joint.values()), dtype=torch.float64)
    n = float(table.sum())
    col = table.sum(dim=0)
    row = table.sum(dim=1)
    h_e = _entropy(col / n)
    p_row = table / row[:, None]
    h_cond = float((row / n * -(p_row * p_row.clamp(min=1e-300).log()).sum(dim=1)).sum())
    mi = h_e - h_cond
    cells = int((table > 0).sum())
    bias = (cells - int((row > 0).sum()) - int((col > 0).sum()) + 1) / (2 * n)
    return {"top1_token_mutual_information": mi,
            "top1_token_mutual_information_corrected": mi - bias,
            "top1_modal_share": float(table.max(dim=1).values.sum() / n)}


def _backbone(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> None:
    """One forward through whichever backbone ``model`` has (pre-training or classification model)."""
    for attr in ("switch", "bert", "model"):
        backbone = getattr(model, attr, None)
        if isinstance(backbone, nn.Module):
            if attr in ("switch", "bert"):
                backbone(input_ids=ids, attention_mask=mask)
            else:
                backbone(input_ids=ids, attention_mask=mask, use_cache=False)
            return
    model(input_ids=ids, attention_mask=mask)
