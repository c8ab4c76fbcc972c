"""Owner experts: one expert per record per trained MoE layer (METHOD.md, "One update", step 2).

* top-1 routers (Switch): the most frequent top-1 choice over the record's non-pad tokens;
* top-k routers: ``argmax_e`` of the summed top-k routing weight over the record's non-pad tokens;
* ties go to the lowest expert id (``torch.argmax`` returns the first maximal index); a record
  with no tokens goes to expert 0.

Legend: N tokens (B records x T positions, record-major), K top-k slots, E experts, B records.

Privacy: the owner of a record depends on that record and the current model only; nothing is
aggregated across records.
"""

from __future__ import annotations

import torch


def _argmax_lowest(scores_BE: torch.Tensor) -> torch.Tensor:
    if scores_BE.shape[0] == 0:
        return torch.zeros(0, dtype=torch.long, device=scores_BE.device)
    return torch.argmax(scores_BE, dim=1)


def owners_from_topk(
    top_k_index_NK: torch.Tensor,
    top_k_weights_NK: torch.Tensor,
    token_mask_N: torch.Tensor,
    *,
    num_records: int,
    num_experts: int,
) -> torch.Tensor:
    """Owner per record from top-k routing: argmax of summed routing weight (ties -> lowest id).

    Tokens are record-major (token ``n`` belongs to record ``n // T``). Pad tokens (mask 0) are
    ignored. Returns ``owner_B`` (long).
    """
    n = top_k_index_NK.shape[0]
    if num_records == 0:
        return torch.zeros(0, dtype=torch.long, device=top_k_index_NK.device)
    tokens_per_record = n // num_records
    rec_N = torch.arange(n, device=top_k_index_NK.device) // max(tokens_per_record, 1)
    w_NK = top_k_weights_NK.detach().to(torch.float64) * token_mask_N.to(torch.float64)[:, None]
    scores_BE = torch.zeros(num_records, num_experts, dtype=torch.float64, device=w_NK.device)
    rec_NK = rec_N[:, None].expand_as(top_k_index_NK)
    scores_BE.index_put_((rec_NK.reshape(-1), top_k_index_NK.reshape(-1).long()), w_NK.reshape(-1), accumulate=True)
    return _argmax_lowest(scores_BE)


def owners_from_top1(choice_N: torch.Tensor, token_mask_N: torch.Tensor, *, num_records: int,
                     num_experts: int) -> torch.Tensor:
    """Owner per record from top-1 choices: the most frequent choice (ties -> lowest id)."""
    n = choice_N.shape[0]
    if num_records == 0:
        return torch.zeros(0, dtype=torch.long, device=choice_N.device)
    rec_N = torch.arange(n, device=choice_N.device) // max(n // num_records, 1)
    counts_BE = torch.zeros(num_records, num_experts, dtype=torch.long, device=choice_N.device)
    counts_BE.index_put_((rec_N, choice_N.long()), token_mask_N.long(), accumulate=True)
    return _argmax_lowest(counts_BE)
