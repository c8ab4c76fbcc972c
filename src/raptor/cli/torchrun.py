"""``raptor train --set run.distributed=true``: a data-parallel run under ``torchrun`` and its communicator.

One process per rank, started by ``torchrun`` (README, "Several processes, several nodes"): every
rank loads the data and the model, rank 0 computes the public stage and writes the checkpoint and
results.json (docs/DISTRIBUTED.md).
"""

from __future__ import annotations

import argparse
import os

from raptor.errors import ConfigError


def check_supported(args: argparse.Namespace) -> None:
    """``run.distributed`` runs ``--objective classify`` only (generation's evaluation is not sharded)."""
    if args.distributed and getattr(args, "objective", "classify") != "classify":
        raise ConfigError("--set run.distributed=true supports --objective classify only; drop it for generate")


def launch_rank(name: str = "RANK") -> int:
    """This process's rank as torchrun's launch protocol gives it (``RANK`` in the job, ``LOCAL_RANK``
    on the node); 0 outside torchrun. The one place the CLI reads torchrun's environment."""
    return int(os.environ.get(name, "0"))


def communicator_from_args(args: argparse.Namespace):
    """The run's communicator: one process without ``run.distributed``, else the torchrun job's."""
    from raptor.training.run.distributed import DistConfig, init_communicator

    if not args.distributed:
        return init_communicator(None)
    check_supported(args)
    backend = args.dist_backend or ("nccl" if str(args.device).startswith("cuda") else "gloo")
    local_rank = launch_rank("LOCAL_RANK")  # the process's GPU index on its node
    return init_communicator(DistConfig(backend, args.dist_timeout, local_rank), args.device)
