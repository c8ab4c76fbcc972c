"""Owner assignment: top-k summed weight, top-1 majority, ties to the lowest id, empty records."""

from __future__ import annotations

import torch

from raptor.roles.owners import owners_from_top1, owners_from_topk


def test_topk_argmax_of_summed_weight_with_pad_ignored():
    # 2 records x 3 tokens, top-2 of 4 experts
    index = torch.tensor([[0, 1], [1, 2], [3, 0], [2, 3], [2, 1], [0, 3]])
    weight = torch.tensor([[0.6, 0.4], [0.5, 0.5], [0.9, 0.1], [0.7, 0.3], [0.6, 0.4], [0.5, 0.5]])
    mask = torch.tensor([1, 1, 0, 1, 1, 1])
    owner = owners_from_topk(index, weight, mask, num_records=2, num_experts=4)
    # record 0: e0 .6, e1 .9, e2 .5 (token 2 is pad) -> 1; record 1: e2 1.3 -> 2
    assert owner.tolist() == [1, 2]


def test_ties_go_to_lowest_id_and_empty_record_to_zero():
    index = torch.tensor([[2, 1], [3, 0]])
    weight = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    owner = owners_from_topk(index, weight, torch.tensor([1, 0]), num_records=2, num_experts=4)
    assert owner.tolist() == [1, 0]


def test_top1_majority():
    choice = torch.tensor([3, 3, 1, 2, 2, 1, 0, 0, 0])
    mask = torch.tensor([1, 1, 1, 1, 1, 0, 0, 0, 0])
    owner = owners_from_top1(choice, mask, num_records=3, num_experts=4)
    assert owner.tolist() == [3, 2, 0]


def test_empty_batch():
    empty = torch.zeros(0, 2, dtype=torch.long)
    assert owners_from_topk(empty, empty.float(), torch.zeros(0), num_records=0, num_experts=4).shape == (0,)
