"""Rank 1 dies after the first all-reduce; rank 0's second must raise DistributedError (no hang).
Run with torchrun's env:// variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); not collected."""

from __future__ import annotations

import os
import sys

import torch

from raptor.training.run.distributed import DistConfig, init_communicator

if __name__ == "__main__":
    comm = init_communicator(DistConfig("gloo", float(sys.argv[1])), "cpu")
    grads = {"w": torch.ones(3)}
    assert torch.equal(comm.all_reduce_grads(grads)[0]["w"], torch.full((3,), 2.0))
    if comm.rank == 1:
        os._exit(3)  # a dead rank: no cleanup, no message
    comm.all_reduce_grads(grads)
    print("unreachable: the all-reduce with a dead rank returned")
