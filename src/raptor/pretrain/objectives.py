"""Pre-training objectives on packed public token blocks.

* masked-token prediction (encoder families): BERT's rule. Each non-special position is chosen
  with probability ``mask_prob``; a chosen position becomes ``[MASK]`` (80%), a random token
  (10%) or stays (10%), and the loss is the cross-entropy at the chosen positions only. Every draw
  comes from the ``torch.Generator`` passed in.
* causal LM (decoder families): next-token cross-entropy at every position but the last.

Each returns ``(loss, correct, count)`` so the caller can report top-1 accuracy too.

Legend: B blocks, T tokens, M masked positions, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import nn

from raptor.pretrain.lm import lm_backbone_hidden, lm_logits


def mask_tokens(ids_BT: torch.Tensor, *, mask_id: int, vocab_size: int, special_ids: tuple[int, ...],
                mask_prob: float, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT masking: returns (corrupted ids ``[B, T]``, chosen positions ``[B, T]`` bool).

    Random replacements are drawn uniformly from ``range(vocab_size)``; a draw that hits a special
    token leaves the position unchanged.
    """
    specials = torch.tensor(special_ids, dtype=ids_BT.dtype)
    special = torch.isin(ids_BT, specials)
    u = torch.rand(ids_BT.shape, generator=generator)
    chosen = (u < mask_prob) & ~special
    kind = torch.rand(ids_BT.shape, generator=generator)
    random_ids = torch.randint(0, vocab_size, ids_BT.shape, generator=generator)
    out = ids_BT.clone()
    out[chosen & (kind < 0.8)] = mask_id
    swap = chosen & (kind >= 0.8) & (kind < 0.9) & ~torch.isin(random_ids, specials)
    out[swap] = random_ids[swap]
    return out, chosen


def mlm_loss(model: nn.Module, ids_BT: torch.Tensor, *, mask_id: int, vocab_size: int,
             special_ids: tuple[int, ...], mask_prob: float, generator: torch.Generator):
    """Masked-token cross-entropy (mean over chosen positions), correct predictions, count."""
    # the masks are drawn on the CPU from the CPU generator (the same draws on every device), then moved
    device = next(model.parameters()).device
    ids_BT = ids_BT.cpu()
    corrupted, chosen = mask_tokens(ids_BT, mask_id=mask_id, vocab_size=vocab_size, special_ids=special_ids,
                                    mask_prob=mask_prob, generator=generator)
    ids_BT, corrupted, chosen = ids_BT.to(device), corrupted.to(device), chosen.to(device)
    hidden_BTD = lm_backbone_hidden(model, corrupted, torch.ones_like(ids_BT))
    logits_MV = lm_logits(model, hidden_BTD[chosen]).float()
    target_M = ids_BT[chosen]
    if target_M.numel() == 0:
        return hidden_BTD.sum() * 0.0, 0, 0
    loss = nn.functional.cross_entropy(logits_MV, target_M)
    correct = int((logits_MV.detach().argmax(dim=-1) == target_M).sum())
    return loss, correct, int(target_M.numel())


def causal_loss(model: nn.Module, ids_BT: torch.Tensor):
    """Next-token cross-entropy (mean over B (T-1) positions), correct predictions, count."""
    ids_BT = ids_BT.to(next(model.parameters()).device)
    hidden_BTD = lm_backbone_hidden(model, ids_BT, torch.ones_like(ids_BT))
    logits = lm_logits(model, hidden_BTD[:, :-1]).float()
    target = ids_BT[:, 1:]
    loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
    correct = int((logits.detach().argmax(dim=-1) == target).sum())
    return loss, correct, int(target.numel())
