"""A tiny DP run of every method, for the torchrun tests (not collected by pytest).

``python dist_worker.py OUT [--distributed] [--methods m1,m2] [--save-dir DIR] [--secure-check]``:
trains a tiny Switch MoE (4 experts, seed 5) with fixed sigmas and SGD for STEPS updates per
method and, on rank 0, saves to OUT ``{method: {"params": [flat float64 trainable params after each
step], "epsilon": [ledger epsilon after each step], "dev": evaluation point, "nonfinite": count}}``.
``raptor-bf16`` is raptor with a bf16 model (``"params"`` are then the float32 master weights).

``--save-dir DIR``: every method is checkpointed after step STEPS-1 into DIR/METHOD; then a fresh
trainer resumes that checkpoint in the same job (same world size) and takes the last step
(``"resumed"``: its params and epsilon).

``--secure-check`` (with ``--distributed``): checks of the secure (AES-CTR) path across ranks,
saved under ``"secure"``: the ranks' samplers draw the same stream and their noise generators
different ones; a release of zero sums with sigma C / n = 1 on 20,000 coordinates has std ~1 after
the all-reduce (noise once: two draws would give sqrt(2)); and a secure 2-step raptor run leaves
identical replicas.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from tiny_records import records  # this directory is on sys.path: the worker runs as a script

from raptor.moe.models import TinySize, build_model
from raptor.recipes import tiny_recipe
from raptor.training.config import OptimConfig, PerformanceConfig, PrivacyConfig
from raptor.training.methods import METHOD_SPECS
from raptor.training.run.assemble import build_trainer
from raptor.training.run.distributed import DistConfig, init_communicator

STEPS = 3
METHODS = (*METHOD_SPECS, "raptor-bf16")


def flat_params(trainer) -> torch.Tensor:
    """The trainable weights (the float32 masters of a bf16 run) as one float64 vector."""
    return torch.cat([m.detach().reshape(-1).double() for m in trainer.masters.values()])


def build(method: str, comm=None, *, secure: bool = False):
    dtype = "bfloat16" if method.endswith("-bf16") else "float32"
    method = method.removesuffix("-bf16")
    model = build_model("switch_transformers", generator=torch.Generator().manual_seed(5),
                        size=TinySize(num_experts=4, top_k=1))
    cfg = tiny_recipe(method, steps=STEPS, batch_size=8, seed=None if secure else 0,
                      privacy=PrivacyConfig(epsilon=None, noise_multipliers=(1.0, 1.0), secure_rng=secure),
                      performance=PerformanceConfig(micro_batch_size=4, eval_batch_size=16, dtype=dtype),
                      optim=OptimConfig(name="sgd", lr=0.05, weight_decay=0.0))
    return build_trainer(cfg, model, train=records(48, 1), validation=records(16, 2), public=records(24, 3),
                         comm=comm)


def run_method(method: str, comm, save_dir=None) -> dict:
    from raptor.accounting.ledger import PrivacyLedger

    trainer = build(method, comm)
    out = {"params": [], "epsilon": []}
    for t in range(STEPS):
        trainer.step()
        if save_dir is not None and t == STEPS - 2:
            trainer.save(Path(save_dir) / method)  # rank 0 writes, every rank waits
        out["params"].append(flat_params(trainer))
        out["epsilon"].append(trainer.epsilon_spent())
    out["dev"] = trainer.evaluate()
    out["nonfinite"] = trainer.state.nonfinite_records
    if save_dir is not None:  # resume with the same world size
        again = build(method, comm)
        again.resume(Path(save_dir) / method, PrivacyLedger.from_dict)
        again.step()
        out["resumed"] = {"params": flat_params(again), "epsilon": again.epsilon_spent()}
    return out


def secure_check(comm) -> dict:
    import torch.distributed as dist

    from raptor.mechanisms import GeneratorSpec
    from raptor.roles.groups import ParamSlice
    from raptor.training.step.release import GroupRelease, release_gradients

    gens = comm.generators(GeneratorSpec(secure=True), "cpu")
    draws = [None] * comm.world_size
    dist.all_gather_object(draws, (gens["sample"].uniform(64), gens["noise"].uniform(64)))
    w = torch.nn.Parameter(torch.zeros(20_000))
    rel = (GroupRelease("g", "shared", clip_norm=2.0, sigma=1.5, denominator=3.0),)  # std 1.5 * 2 / 3 = 1
    local = release_gradients({}, {"g": (ParamSlice("w"),)}, {"w": w}, comm.local_groups(rel), gens["noise"])
    local_std = float(local["w"].std())
    grads, _ = comm.all_reduce_grads(local)
    trainer = build("raptor", comm, secure=True)
    trainer.run_steps(2)
    replicas = [None] * comm.world_size
    dist.all_gather_object(replicas, flat_params(trainer))
    return {"samplers_equal": all(torch.equal(d[0], draws[0][0]) for d in draws),
            "noise_streams_differ": not torch.equal(draws[0][1], draws[1][1]),
            "local_std_rank0": local_std if comm.is_main else None, "released_std": float(grads["w"].std()),
            "replicas_equal": all(torch.equal(r, replicas[0]) for r in replicas),
            "replica_moved": float((replicas[0] - flat_params(build("raptor", None))).abs().max())}


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--distributed", action="store_true")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--save-dir", default=None, help="checkpoint every method after step STEPS-1, then resume it")
    p.add_argument("--secure-check", action="store_true")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    comm = init_communicator(DistConfig("gloo", a.timeout) if a.distributed else None, "cpu")
    results = {m: run_method(m, comm, a.save_dir) for m in a.methods.split(",")}
    if a.secure_check:
        results["secure"] = secure_check(comm)
    if comm.is_main:
        torch.save(results, a.out)
    comm.barrier()
    comm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
