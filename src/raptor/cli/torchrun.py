"""``raptor train --distributed``: the flags of a data-parallel run under ``torchrun`` and its communicator.

One process per rank, started by ``torchrun`` (README, "Several processes, several nodes"): every
rank loads the data and the model, rank 0 computes the public stage and writes the checkpoint and
results.json (docs/DISTRIBUTED.md).
"""

from __future__ import annotations

import argparse
import os

from raptor.cli.sections import section
from raptor.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    run_g = section(parser, "run")
    run_g.add_argument("--distributed", action="store_true",
                       help="data-parallel DP under torchrun, one process per rank (see README) (default off)")
    run_g.add_argument("--dist-backend", choices=("gloo", "nccl"), default=None,
                       help="process-group backend (default: nccl with --device cuda, else gloo)")
    run_g.add_argument("--dist-timeout", type=float, default=300.0,
                       help="seconds a collective may wait for another rank before the job stops (default 300; "
                            "must exceed rank 0's public stage, which the other ranks wait for)")


def check_supported(args: argparse.Namespace) -> None:
    """``--distributed`` runs ``--objective classify`` only (generation's evaluation is not sharded)."""
    if args.distributed and getattr(args, "objective", "classify") != "classify":
        raise ConfigError("--distributed supports --objective classify only; drop --distributed for generate")


def launch_rank(name: str = "RANK") -> int:
    """This process's rank as torchrun's launch protocol gives it (``RANK`` in the job, ``LOCAL_RANK``
    on the node); 0 outside torchrun. The one place the CLI reads torchrun's environment."""
    return int(os.environ.get(name, "0"))


def communicator_from_args(args: argparse.Namespace):
    """The run's communicator: one process without ``--distributed``, else the torchrun job's."""
    from raptor.training.run.distributed import DistConfig, init_communicator

    if not args.distributed:
        return init_communicator(None)
    check_supported(args)
    backend = args.dist_backend or ("nccl" if str(args.device).startswith("cuda") else "gloo")
    local_rank = launch_rank("LOCAL_RANK")  # the process's GPU index on its node
    return init_communicator(DistConfig(backend, args.dist_timeout, local_rank), args.device)
