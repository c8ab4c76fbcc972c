"""``raptor.pretrain.upcycle.collect_block_inputs``, the shared reader behind the encoder's
``ffn_inputs`` and the decoder's ``mlp_inputs``: which rows it keeps and how its token cap counts."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from raptor.pretrain.upcycle import collect_block_inputs


class _Toy(nn.Module):
    """An embedding (the rows are the token ids) and two linear blocks in a row."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(1, 1), nn.Linear(1, 1)])

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = ids.float().unsqueeze(-1)
        for b in self.blocks:
            x = b(x)
        return x


def _batches():
    ids = torch.tensor([[1, 10, 11, 0], [1, 12, 0, 0]])  # 1: a special token, 0: padding
    mask = (ids != 0).long()
    return [(ids, mask), (ids + 20 * mask, mask)]


def _collect(model, batches, cap, count, **kw):
    return collect_block_inputs(dict(enumerate(model.blocks)), model, batches, cap, (1,), count=count, **kw)


def test_rows_are_the_real_tokens_of_each_block():
    model = _Toy()
    got = _collect(model, _batches(), 100, "selected")
    assert got[0].squeeze(1).tolist() == [10, 11, 12, 21, 30, 31, 21, 32]
    with torch.no_grad():
        assert torch.equal(got[1], model.blocks[0](got[0]))
    assert not any(b._forward_pre_hooks for b in model.blocks)  # hooks removed


@pytest.mark.parametrize("cap, attended, selected", [(2, 2, 2), (3, 3, 3), (5, 3, 5), (8, 8, 8), (100, 8, 8)])
def test_the_cap_cuts_the_rows(cap, attended, selected):
    """Batch 1 has 5 attended tokens, 3 of them real (not padding, not the excluded id 1); batch 2 has
    5 more, all real. "attended" counts 5 per batch, "selected" the rows kept; either way at most
    ``cap`` rows come back."""
    assert _collect(_Toy(), _batches(), cap, "attended")[0].shape[0] == attended
    assert _collect(_Toy(), _batches(), cap, "selected")[0].shape[0] == selected


def test_no_batches_and_a_bad_count():
    assert _collect(_Toy(), [], 4, "attended")[0].shape == (0,)
    assert _collect(_Toy(), [], 4, "selected", width=7)[1].shape == (0, 7)
    with pytest.raises(ValueError, match="count"):
        _collect(_Toy(), _batches(), 4, "all")
