"""Data-parallel DP training under ``torchrun``: one communicator object the Trainer talks to.

The Trainer, ``build_trainer`` and the :class:`~raptor.training.evaluator.Evaluator` never call
``torch.distributed`` themselves; they hold a :class:`Communicator`. :class:`SingleProcess` (world
size 1) is the single-process path exactly: every method is the identity. :class:`TorchCommunicator`
runs the same mechanism over a ``torch.distributed`` process group started by ``torchrun`` (gloo on
CPU, nccl on GPU); :func:`init_communicator` makes one. docs/DISTRIBUTED.md has the proofs.

One update t on W ranks (rank r = 0..W-1):

1. **Sampling** (:meth:`Communicator.sample`). Every rank's sampling generator is in the SAME state
   (:meth:`Communicator.generators`): seeded runs seed it with the run's seed; secure runs start
   every rank's AES-256-CTR stream at rank 0's state (key and counter from rank 0's OS CSPRNG,
   broadcast once; a mid-run checkpoint holds it as in one process). Each rank draws the same N uniforms U_1..U_N and keeps S_t^r = {i : i mod W = r, U_i < q}.
   The shards {i : i mod W = r} partition [N], so the union over ranks is {i : U_i < q}: one
   Poisson sample at rate q (independent Bernoulli(q) memberships, |union| ~ Binomial(N, q)), the
   very sample the one-process run draws from the same generator state.
2. **Sums.** Each rank computes the engine's per-group clipped sums over its own records.
3. **Noise, once: rank 0 draws** (:meth:`Communicator.local_groups`). Rank 0 releases
   (S_g^0 + N(0, sigma_g^2 C_g^2 I)) / n_g from its noise generator; every other rank releases
   S_g^r / n_g (the plan's group with sigma 0: no draw). Division by the public n_g is linear, so
   after the sum over ranks the release is (sum_r S_g^r + Z_g) / n_g with exactly one Gaussian Z_g
   per group. Under secure RNG the noise key is made on rank 0 and never leaves it.
4. **One all-reduce** (:meth:`Communicator.all_reduce_grads`): the step's released tensors (and
   the step's count of non-finite records) are flattened into ONE float32 buffer (float64 for
   float64 runs; beyond :data:`BUCKET_BYTES`, a few buffers of that size), SUM-all-reduced once,
   and unflattened: every rank holds the same noisy gradient
   and steps identical optimizers, so the replicas stay equal.
5. **Ledger and checkpoint.** The ledger is a function of the public (q, sigma_t) sequence, so
   every rank keeps an identical replica (all stop together on a budget error); rank 0 alone
   writes checkpoints and results (:attr:`Communicator.is_main`), then a barrier.

Public statistics (routing, layer choice, shares n_hat, clip norms) are computed once on rank 0
and broadcast (:meth:`Communicator.on_main`); the initial weights are broadcast from rank 0
(:meth:`Communicator.broadcast_module_`). The dev evaluation is sharded in contiguous slices and
the predictions and loss sums gathered (:meth:`Communicator.gather_predictions`).

Failures: the process group has a timeout (``run.dist_timeout``); a collective that fails (a dead
peer: gloo sees the closed connection at once, nccl at the timeout) raises
:class:`DistributedError` naming the operation, the rank and the flag. Never a hang.

Privacy: what crosses the network is the per-rank clipped sums divided by the public n_g (rank 0's
with the noise), the non-finite count, public statistics, initial weights, dev predictions, and
in secure runs the sampling key: the interconnect must be as trusted as the hosts' memory. Nothing
is logged.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import torch

from raptor.errors import ConfigError, RaptorError
from raptor.mechanisms import GeneratorSpec, poisson_sample
from raptor.training.step.release import GroupRelease

BACKENDS = ("gloo", "nccl")
#: Largest all-reduce buffer: the released gradients of a step travel in one buffer up to this
#: size (every tiny and LoRA run), in a few buffers of this size beyond (bounds the extra memory).
BUCKET_BYTES = 1 << 30


class DistributedError(RaptorError):
    """A collective failed: another rank died, or the process group timed out."""


@dataclass(frozen=True)
class DistConfig:
    """How the process group is joined: backend ("gloo" on CPU, "nccl" on CUDA), timeout, and the
    process's GPU index on its node (nccl; the CLI passes torchrun's LOCAL_RANK)."""

    backend: str = "gloo"
    timeout_s: float = 300.0
    local_rank: int = 0

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"run.dist_backend must be 'gloo' or 'nccl', got {self.backend!r}")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) or not self.timeout_s > 0:
            raise ConfigError(f"run.dist_timeout must be a number of seconds > 0, got {self.timeout_s!r}")
        if isinstance(self.local_rank, bool) or not isinstance(self.local_rank, int) or self.local_rank < 0:
            raise ConfigError(f"the local rank (torchrun's LOCAL_RANK) must be an integer >= 0, got {self.local_rank!r}")


class Communicator:
    """World size 1: every operation is the identity (the single-process path exactly)."""

    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # -- randomness and sampling ---------------------------------------------------------------
    def generators(self, spec: GeneratorSpec, device: str | torch.device) -> dict:
        """The run's "sample" (CPU) and "noise" (``device``) mechanism generators.

        One process: ``spec.mechanism(0)`` and ``spec.mechanism(1, device)``. Several: the same,
        except that a secure run's sampler is keyed identically on every rank from rank 0's CSPRNG
        (the noise generator stays each rank's own; only rank 0's draws)."""
        sample, noise = spec.mechanism(0), spec.mechanism(1, device)
        if self.world_size > 1 and spec.secure:  # rank 0's sampler state (AES key and counter) on every rank
            sample.set_state(self.broadcast_object(sample.get_state() if self.is_main else None))
        return {"sample": sample, "noise": noise}

    def sample(self, num_records: int, sample_rate: float, generator) -> torch.Tensor:
        """This rank's part of one Poisson sample (module doc, step 1): all N uniforms are drawn
        on every rank, so the generators stay in step."""
        idx = poisson_sample(num_records, sample_rate, generator)
        if self.world_size == 1:
            return idx
        return idx[idx % self.world_size == self.rank]

    # -- the release ---------------------------------------------------------------------------
    def local_groups(self, groups: Sequence[GroupRelease]) -> tuple[GroupRelease, ...]:
        """The step plan's groups as THIS rank releases them: unchanged on rank 0 (its noise is the
        step's noise), sigma 0 elsewhere (no draw): the all-reduce adds the noise once."""
        if self.is_main:
            return tuple(groups)
        return tuple(replace(g, sigma=0.0) for g in groups)

    def all_reduce_grads(self, grads: dict[str, torch.Tensor], count: int = 0) -> tuple[dict[str, torch.Tensor], int]:
        """(sum over ranks of ``grads``, sum over ranks of ``count``) with ONE collective."""
        return grads, int(count)

    # -- public data, evaluation, checkpoints --------------------------------------------------
    def broadcast_object(self, obj):
        """``obj`` (picklable) from rank 0 on every rank."""
        return obj

    def on_main(self, fn: Callable[[], object]):
        """``fn()`` computed on rank 0 only and broadcast (tensors moved to the CPU first)."""
        return fn()

    def broadcast_module_(self, module: torch.nn.Module) -> torch.nn.Module:
        """Every parameter and buffer of ``module`` set to rank 0's values, in place (random inits,
        e.g. LoRA or a tiny family in a secure run, differ between ranks otherwise)."""
        return module

    def shard_range(self, n: int) -> tuple[int, int]:
        """[start, stop) of this rank's contiguous shard of n evaluation records."""
        return n * self.rank // self.world_size, n * (self.rank + 1) // self.world_size

    def gather_predictions(self, preds: torch.Tensor, loss_sum: float) -> tuple[torch.Tensor, float]:
        """(every rank's predictions concatenated in rank order, the sum of the loss sums)."""
        return preds, float(loss_sum)

    def barrier(self) -> None:
        return None

    def close(self) -> None:
        return None


SingleProcess = Communicator


def _to_cpu(obj):
    """``obj`` with every tensor in it (dicts, lists, tuples, dataclass fields) moved to the CPU, so
    that no rank unpickles a tensor onto another rank's GPU."""
    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, Mapping):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(_to_cpu(v) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return replace(obj, **{f.name: _to_cpu(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init})
    return obj


def _buckets(tensors: Mapping[str, torch.Tensor], max_numel: int) -> list[list[str]]:
    """Names in order, cut into consecutive buckets of at most ``max_numel`` elements (a larger
    tensor alone); at least one bucket, possibly empty."""
    buckets: list[list[str]] = [[]]
    size = 0
    for name, t in tensors.items():
        if buckets[-1] and size + t.numel() > max_numel:
            buckets.append([])
            size = 0
        buckets[-1].append(name)
        size += t.numel()
    return buckets


def _wire_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype in (torch.bfloat16, torch.float16):
        return torch.float32
    return torch.uint8 if dtype == torch.bool else dtype


class TorchCommunicator(Communicator):
    """The communicator over an initialised ``torch.distributed`` default process group."""

    def __init__(self, timeout_s: float):
        import torch.distributed as dist

        if not dist.is_initialized():
            raise ConfigError("TorchCommunicator needs an initialised process group; use init_communicator()")
        self._dist = dist
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.timeout_s = timeout_s
        # where collectives run: nccl needs CUDA tensors, gloo takes CPU ones
        self.comm_device = torch.device("cuda", torch.cuda.current_device()) \
            if dist.get_backend() == "nccl" else torch.device("cpu")

    def _run(self, what: str, fn):
        try:
            return fn()
        except (self._dist.DistError, RuntimeError) as exc:
            raise DistributedError(
                f"rank {self.rank}/{self.world_size}: {what} failed ({type(exc).__name__}: {str(exc)[:200]}). "
                "Another rank died or the process group timed out "
                f"(run.dist_timeout={self.timeout_s:g} s); the job stops here: resume from the last checkpoint"
            ) from exc

    def all_reduce_grads(self, grads, count=0):
        wide = torch.float64 if any(g.dtype == torch.float64 for g in grads.values()) else torch.float32
        out: dict[str, torch.Tensor] = {}
        buckets = _buckets(grads, BUCKET_BYTES * 8 // torch.finfo(wide).bits)
        for i, names in enumerate(buckets):
            parts = [grads[n].detach().reshape(-1).to(device=self.comm_device, dtype=wide) for n in names]
            if i == len(buckets) - 1:  # the step's non-finite count rides in the last bucket
                parts.append(torch.tensor([float(count)], dtype=wide, device=self.comm_device))
            flat = torch.cat(parts)
            self._run("all_reduce of the released gradients", lambda f=flat: self._dist.all_reduce(f))
            offset = 0
            for n in names:
                g = grads[n]
                out[n] = flat[offset:offset + g.numel()].view(g.shape).to(device=g.device, dtype=g.dtype)
                offset += g.numel()
        return out, int(round(float(flat[-1])))

    def broadcast_object(self, obj):
        box = [obj if self.is_main else None]
        self._run("broadcast_object", lambda: self._dist.broadcast_object_list(box, src=0))
        return box[0]

    def on_main(self, fn):
        return self.broadcast_object(_to_cpu(fn()) if self.is_main else None)

    @torch.no_grad()
    def broadcast_module_(self, module):
        # one flat buffer per wire dtype (bf16/fp16 travel as float32, exactly: gloo mis-sizes bf16)
        buckets: dict[torch.dtype, list[torch.Tensor]] = {}
        for t in dict.fromkeys(module.state_dict(keep_vars=True).values()):  # tied tensors once
            buckets.setdefault(_wire_dtype(t.dtype), []).append(t)
        for wire, tensors in buckets.items():
            flat = torch.cat([t.detach().reshape(-1).to(device=self.comm_device, dtype=wire) for t in tensors])
            self._run(f"broadcast of the initial weights ({wire})", lambda f=flat: self._dist.broadcast(f, src=0))
            offset = 0
            for t in tensors:
                t.data.copy_(flat[offset:offset + t.numel()].view(t.shape))
                offset += t.numel()
        return module

    def gather_predictions(self, preds, loss_sum):
        parts: list = [None] * self.world_size
        self._run("all_gather of the evaluation predictions",
                  lambda: self._dist.all_gather_object(parts, (preds.cpu(), float(loss_sum))))
        nonempty = [p for p, _ in parts if p.numel()] or [parts[0][0]]
        return torch.cat(nonempty), float(sum(s for _, s in parts))

    def barrier(self) -> None:
        self._run("barrier", lambda: self._dist.barrier())

    def close(self) -> None:
        if self._dist.is_initialized():
            self._dist.destroy_process_group()


def init_communicator(config: DistConfig | None, device: str | torch.device = "cpu") -> Communicator:
    """``SingleProcess()`` for ``config=None``; else join the process group ``torchrun`` set up
    (``init_method="env://"``: torchrun's rendezvous provides rank, world size and address) with
    ``config.backend`` and ``config.timeout_s`` and return a :class:`TorchCommunicator`.

    With nccl, each process takes the GPU ``config.local_rank``."""
    if config is None:
        return SingleProcess()
    import torch.distributed as dist

    device = torch.device(device)
    if config.backend == "nccl" and device.type != "cuda":
        raise ConfigError("run.dist_backend=nccl needs --device cuda; use run.dist_backend=gloo on CPU")
    if not dist.is_available():
        raise ConfigError("this torch build has no torch.distributed; drop run.distributed=true")
    if not dist.is_initialized():
        if config.backend == "nccl":
            torch.cuda.set_device(config.local_rank)
        try:  # env:// is torchrun's launch protocol (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), read by torch
            dist.init_process_group(backend=config.backend, init_method="env://",
                                    timeout=datetime.timedelta(seconds=config.timeout_s))
        except ValueError as err:  # torch: "environment variable RANK expected, but not set"
            raise ConfigError(f"run.distributed=true: no process group to join ({err}); launch with "
                              "torchrun (README, 'Several processes, several nodes')") from err
    return TorchCommunicator(config.timeout_s)
