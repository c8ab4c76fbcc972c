"""Speed and peak memory of raptor's per-record engine vs the plain (non-private) step, on CPU.

For every family and configuration it measures, in one process:

* the **plain step**: ``model(input_ids, attention_mask)`` -> mean cross-entropy ->
  ``loss.backward()`` (gradients land in ``param.grad``), with the model's own experts
  implementation;
* the **engine step**: ``PerRecordEngine(model, trained_layers=<all MoE layers>,
  grouping="roles").compute(batch, clip_norms)`` with every clip norm = 1.0 (clipping active):
  forward with capture, one backward, per-record per-group norms, clip factors, clipped sums;

after ``--warmup`` untimed rounds, ``--reps`` timed rounds in ABBA order; it reports the median
and IQR of each and ``time_ratio = median(engine) / median(plain)``. The engine's time is split
into phases (forward, loss, backward, reduce) by wrapping the model's forward,
``torch.autograd.backward`` and the engine's ``_reduce``, and the time inside each
``raptor.per_sample.norms`` helper is summed per use kind wherever it runs (benchmark-only
instrumentation; the engine is not modified).

Peak memory: the peak RSS increase of one step over the RSS just before it, heap trimmed and the
kernel high-water mark reset before each step (see ``_common.py``); the larger of two
measurements per step. ``mem_ratio = engine / plain`` (the increase: activations, saved tensors,
gradients / clipped sums, scratch); ``mem_ratio_total`` also adds the RSS of the loaded model and
runtime to both sides.

For reference, Opacus (hooks mode, ``DPOptimizer`` clipping with noise 0, no Poisson sampling) on a
dense pre-LN transformer of the same width, depth, heads, vocabulary and batch, with an MLP of
``top_k * expert_intermediate`` (the MoE's active width), against its own plain step.

Each configuration runs in a fresh subprocess (``--worker``) unless ``--in-process``. Threads:
``torch.set_num_threads(--threads)`` (default 1: on a shared 2-core machine two OpenMP threads
per process stall at barriers whenever another process holds a core) in every worker.

Run: ``.venv/bin/python benchmarks/engine_speed.py`` (full, ~10 min on 2 cores) or ``--quick``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

import _common  # noqa: E402

SCHEMA_VERSION = 1
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
DEFAULT_OUT = _HERE / "results" / "engine_speed.json"
OPS_OUT = _HERE / "results" / "engine_ops.json"  # --ops-only
FAMILIES = ("switch_transformers", "olmoe", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3")


@dataclass(frozen=True)
class Config:
    """One measured configuration (model size + batch shape + repetitions)."""

    family: str
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    num_experts: int = 16
    top_k: int = 2
    expert_intermediate: int = 256
    vocab_size: int = 1024
    batch_size: int = 16
    seq_len: int = 128
    warmup: int = 1
    reps: int = 4
    threads: int = 2
    seed: int = 0
    clip_norm: float = 1.0
    profile: bool = False
    tags: tuple[str, ...] = field(default=())
    overrides: tuple[tuple[str, int], ...] = field(default=())  # config fields set after the tiny config
    name: str = ""  # e.g. the real model a real-shape config is shaped like
    device: str = "cpu"  # "cuda": model and batch on the GPU, steps synchronised, peak CUDA memory reported
    dtype: str = "float32"  # or "bfloat16" (weights and activations)
    ops_only: bool = False  # only the ATen op counts of both steps (no timing, no memory)

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_layers", "num_heads", "num_experts", "top_k", "expert_intermediate",
                     "vocab_size", "batch_size", "seq_len", "reps", "threads"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Config.{name} must be a positive integer, got {value!r}")
        if self.warmup < 0:
            raise ValueError(f"Config.warmup must be >= 0, got {self.warmup}")
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"Config.dtype must be 'float32' or 'bfloat16', got {self.dtype!r}")
        if self.family != "opacus_dense" and self.family not in FAMILIES:
            raise ValueError(f"Config.family must be one of {FAMILIES} or 'opacus_dense', got {self.family!r}")

    @property
    def label(self) -> str:
        prefix = f"{self.name}: " if self.name else ""
        where = "" if (self.device, self.dtype) == ("cpu", "float32") else f" [{self.device} {self.dtype}]"
        return (f"{prefix}{self.family} E={self.num_experts} k={self.top_k} T={self.seq_len} B={self.batch_size} "
                f"d={self.hidden_size} L={self.num_layers}{where}")


# ------------------------------------------------------------------------------------------ shared bits


def _batch(cfg: Config):
    import torch

    gen = torch.Generator().manual_seed(cfg.seed + 1)
    ids_BT = torch.randint(3, cfg.vocab_size, (cfg.batch_size, cfg.seq_len), generator=gen)
    mask_BT = torch.ones(cfg.batch_size, cfg.seq_len, dtype=torch.long)
    labels_B = torch.randint(0, 2, (cfg.batch_size,), generator=gen)
    return {"input_ids": ids_BT, "attention_mask": mask_BT, "labels": labels_B}


def _measure_memory(steps: dict[str, Callable[[], object]], clear: Callable[[], None]) -> tuple[int, dict[str, int], str]:
    """Baseline RSS and peak RSS increase per step (after the timed rounds; fixed mmap threshold)."""
    fixed = _common.fix_mmap_threshold()
    for step in steps.values():  # one round under the fixed threshold before measuring
        step()
    clear()
    _common.trim_heap()
    base_rss = _common.rss_bytes()
    peaks, method = _memory(steps, clear)
    for name, step in steps.items():
        clear()
        peaks[f"{name}_tensor"] = _common.peak_tensor_bytes(step)
    clear()
    return base_rss, peaks, method + ("+mmap64k" if fixed else "")


def _memory(steps: dict[str, Callable[[], object]], clear: Callable[[], None]) -> tuple[dict[str, int], str]:
    """Peak RSS increase per step: ABBA order, the larger of two measurements each."""
    names = list(steps)
    peaks: dict[str, int] = {n: 0 for n in names}
    method = "none"
    for name in names + names[::-1]:
        clear()
        peak, method = _common.peak_increase_bytes(steps[name])
        peaks[name] = max(peaks[name], peak)
    clear()
    return peaks, method


def _profile(fn: Callable[[], object], top: int = 15) -> list[dict]:
    """Top ops of one call of ``fn`` by self CPU time (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in rows) or 1.0
    return [
        {"op": e.key, "calls": int(e.count), "self_ms": e.self_cpu_time_total / 1000.0,
         "self_share": e.self_cpu_time_total / total, "total_ms": e.cpu_time_total / 1000.0}
        for e in rows[:top]
    ]


class _PhaseClock(_common.Clock):
    """Accumulates wall time per phase within one step; ``rounds`` keeps one dict per step."""

    def __init__(self) -> None:
        super().__init__()
        self.rounds: list[dict[str, float]] = []
        self.calls: dict[str, int] = defaultdict(int)
        self.last_calls: dict[str, int] = {}

    def wrap_by_use(self, name: str, fn: Callable) -> Callable:
        """Like :meth:`wrap`, keyed by the use's kind (``linear/expert``: rows routed to an expert)."""

        def timed(*args, **kwargs):
            use = args[0] if args and hasattr(args[0], "kind") else None
            key = name
            if use is not None:
                routed = getattr(use, "slot", None) is not None or getattr(use, "rec", None) is not None
                key = f"{name}[{use.kind}{'/expert' if routed else ''}]"
            self.calls[key] += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.current[key] += time.perf_counter() - t0

        return timed

    def close_round(self, total: float | None) -> None:
        row = dict(self.current)
        if total is not None:
            row["other"] = total - sum(row.values())
        self.rounds.append(row)
        self.current = defaultdict(float)
        self.last_calls = dict(self.calls)
        self.calls = defaultdict(int)

    def medians(self) -> dict[str, float]:
        keys = sorted({k for r in self.rounds for k in r})
        return {k: _common.summary([r.get(k, 0.0) for r in self.rounds])["median"] for k in keys}


def _result(cfg: Config, times: dict[str, dict[str, list[float]]], peaks: dict[str, int], method: str,
            base_rss: int, extra: dict) -> dict:
    wall, cpu = times["wall"], times["cpu"]
    tp, te = _common.summary(wall["plain"]), _common.summary(wall["private"])
    cp, ce = _common.summary(cpu["plain"]), _common.summary(cpu["private"])
    paired = [e / p for e, p in zip(wall["private"], wall["plain"], strict=True) if p > 0]
    mp, me = peaks["plain"], peaks["private"]
    out = {
        "config": asdict(cfg),
        "label": cfg.label,
        "time_s": {"plain": tp, "private": te},
        "cpu_s": {"plain": cp, "private": ce},
        "time_ratio": te["median"] / tp["median"],
        "time_ratio_paired": _common.summary(paired)["median"] if paired else None,
        "cpu_time_ratio": ce["median"] / cp["median"] if cp["median"] > 0 else None,
        "mem_bytes": {"plain_peak_increase": mp, "private_peak_increase": me, "baseline_rss": base_rss,
                      "method": method, "plain_peak_tensor": peaks.get("plain_tensor"),
                      "private_peak_tensor": peaks.get("private_tensor")},
        "mem_ratio": (me / mp) if mp > 0 else None,
        "mem_ratio_total": (base_rss + me) / (base_rss + mp) if base_rss + mp > 0 else None,
        "mem_ratio_tensor": (peaks["private_tensor"] / peaks["plain_tensor"]
                             if peaks.get("plain_tensor") else None),
    }
    out.update(extra)
    return out


# ------------------------------------------------------------------------------------------ raptor engine


# ATen ops that launch no kernel: views and aliases of their input, fresh allocations, metadata.
_NO_KERNEL_OPS = frozenset({"empty", "empty_strided", "empty_like", "detach", "lift_fresh", "alias",
                            "set_", "resize_", "_local_scalar_dense"})


def aten_op_counts(fn: Callable[[], object]) -> dict:
    """ATen ops dispatched by one call of ``fn`` (forward, backward and everything else), counted by a
    ``TorchDispatchMode``: ``all`` ops, and ``kernels``: the ops that launch a kernel on an accelerator
    (views, allocations and detaches excluded). ``syncs``: ops that copy a value to the host
    (``_local_scalar_dense``: ``.item()``, ``float()``, ``bool()``, ``.tolist()`` of a tensor) and ops
    whose output shape depends on tensor values (``nonzero``, ``unique*``, boolean indexing), each a
    host synchronisation on a GPU. ``by_op``: the 25 most frequent ops.

    A device-free proxy of a step's launch overhead on a GPU (issue 23): on small shapes the private
    step's extra time there is launch- and synchronisation-bound.
    """
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode

    counts: Counter = Counter()
    kernels = [0]
    syncs = [0]
    sync_ops = {"_local_scalar_dense", "nonzero", "unique_consecutive", "_unique2", "unique_dim", "masked_select",
                "item", "bincount", "repeat_interleave"}

    class Counting(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            counts[name] += 1
            if name in sync_ops:
                syncs[0] += 1
            if not (func.is_view or name in _NO_KERNEL_OPS):
                kernels[0] += 1
            return func(*args, **(kwargs or {}))

    with Counting():
        fn()
    return {"all": sum(counts.values()), "kernels": kernels[0], "syncs": syncs[0],
            "by_op": dict(counts.most_common(25))}


def _setup(cfg: Config):
    """The family's model on the config's device and dtype, its engine (roles, every MoE layer trained),
    the batch and the clip norms."""
    import torch

    from raptor.moe.adapters import get_adapter
    from raptor.moe.models import TinySize, build_model
    from raptor.per_sample.engine import PerRecordEngine

    torch.set_num_threads(cfg.threads)
    size = TinySize(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_layers=cfg.num_layers,
                    num_heads=cfg.num_heads, num_experts=cfg.num_experts, top_k=cfg.top_k,
                    expert_intermediate=cfg.expert_intermediate, max_positions=max(256, cfg.seq_len))
    model = build_model(cfg.family, size=size, generator=torch.Generator().manual_seed(cfg.seed), **dict(cfg.overrides))
    model.to(device=cfg.device, dtype=getattr(torch, cfg.dtype))
    layers = [info.index for info in get_adapter(model).moe_layers(model)]
    engine = PerRecordEngine(model, trained_layers=layers, grouping="roles")
    batch = {k: v.to(cfg.device) for k, v in _batch(cfg).items()}
    clip = {key: cfg.clip_norm for key in engine.group_keys}
    return model, engine, batch, clip


def _op_counts(model, engine, batch: dict, clip: dict) -> dict:
    """:func:`aten_op_counts` of one plain step and one private step (after one untimed round of each),
    and their ratios, private / plain."""
    import torch.nn.functional as F

    params = [p for p in model.parameters() if p.requires_grad]

    def plain() -> None:
        for p in params:
            p.grad = None
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        F.cross_entropy(logits.float(), batch["labels"]).backward()

    def private() -> None:
        engine.compute(batch, clip)

    plain(), private()  # lazy initialisation outside the count
    counts = {"plain": aten_op_counts(plain), "private": aten_op_counts(private)}
    for p in params:
        p.grad = None
    return {"aten_ops": counts,
            "aten_op_ratio": counts["private"]["all"] / counts["plain"]["all"],
            "kernel_ratio": counts["private"]["kernels"] / counts["plain"]["kernels"]}


def ops_worker(cfg: Config) -> dict:
    """Only the ATen op counts of the plain and the private step (``--ops-only``: no timing, no memory)."""
    model, engine, batch, clip = _setup(cfg)
    return {"config": asdict(cfg), "label": cfg.label, "kind": "op_counts", "num_groups": len(engine.group_keys),
            **_op_counts(model, engine, batch, clip)}


def moe_worker(cfg: Config) -> dict:
    """Plain step vs ``PerRecordEngine.compute`` on one family's model (see the module docstring)."""
    import torch
    import torch.nn.functional as F

    import raptor.per_sample.engine as engine_module

    model, engine, batch, clip = _setup(cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    plain_phases, engine_phases = _PhaseClock(), _PhaseClock()

    def clear() -> None:
        for p in params:
            p.grad = None

    def plain_step() -> None:
        clear()
        t0 = time.perf_counter()
        logits = model(input_ids=ids, attention_mask=mask).logits
        loss = F.cross_entropy(logits.float(), labels)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        plain_phases.current.update({"forward": t1 - t0, "backward": t2 - t1})
        plain_phases.close_round(t2 - t0)

    # Benchmark-only phase instrumentation of the engine (nothing in the engine is modified).
    original_forward = model.forward
    original_backward = torch.autograd.backward
    original_loss = engine.loss_fn
    original_reduce = getattr(engine, "_reduce", None)

    # The norm / clipped-sum helpers (functions of raptor.per_sample.norms, looked up as globals of
    # the engine module), timed per use kind wherever they run (in the backward, through the
    # engine's per-use reducer, or in the final reduce).
    reduce_helpers = {n: f for n, f in vars(engine_module).items()
                      if callable(f) and getattr(f, "__module__", "") == "raptor.per_sample.norms"}
    reduce_parts = _PhaseClock()

    def engine_step() -> None:
        model.forward = engine_phases.wrap("forward", original_forward)
        torch.autograd.backward = engine_phases.wrap("backward", original_backward)
        engine.loss_fn = engine_phases.wrap("loss", original_loss)
        if original_reduce is not None:
            engine._reduce = engine_phases.wrap("reduce", original_reduce)
        for n, fn in reduce_helpers.items():
            setattr(engine_module, n, reduce_parts.wrap_by_use(n, fn))
        t0 = time.perf_counter()
        try:
            result = engine.compute(batch, clip)
        finally:
            torch.autograd.backward = original_backward
            del model.forward
            engine.loss_fn = original_loss
            if original_reduce is not None:
                del engine._reduce
            for n, fn in reduce_helpers.items():
                setattr(engine_module, n, fn)
        reduce_parts.close_round(None)
        engine_phases.close_round(time.perf_counter() - t0)
        if result.num_nonfinite:
            raise RuntimeError(f"{cfg.label}: {result.num_nonfinite} non-finite records in a benchmark batch")

    steps = {"plain": plain_step, "private": engine_step}
    cuda = torch.device(cfg.device).type == "cuda"
    if cuda:  # a step ends when its kernels do (phases stay launch times)
        steps = {n: _synced(fn, torch.cuda.synchronize) for n, fn in steps.items()}
    times = _common.run_interleaved(steps, warmup=cfg.warmup, reps=cfg.reps, clocks=CLOCKS)
    plain_rounds, engine_rounds, reduce_rounds = (list(c.rounds[-cfg.reps:]) for c in
                                                  (plain_phases, engine_phases, reduce_parts))
    clear()
    cuda_peaks = {n: _cuda_peak_bytes(fn, cfg.device) for n, fn in steps.items()} if cuda else None
    base_rss, peaks, method = _measure_memory(steps, clear)
    plain_phases.rounds, engine_phases.rounds, reduce_parts.rounds = plain_rounds, engine_rounds, reduce_rounds
    extra = {
        "kind": "raptor_engine",
        "num_params": sum(p.numel() for p in params),
        "num_groups": len(engine.group_keys),
        "phases_s": {"plain": plain_phases.medians(), "private": engine_phases.medians()},
        "helpers_s": reduce_parts.medians(),
        "helpers_calls": reduce_parts.last_calls,
        "device": cfg.device, "dtype": cfg.dtype,
    }
    extra.update(_op_counts(model, engine, batch, clip))
    if cuda_peaks is not None:  # torch.cuda.max_memory_allocated during one step, model and batch included
        extra["peak_cuda_mib"] = {n: b / 2**20 for n, b in cuda_peaks.items()}
        extra["cuda_mem_ratio"] = cuda_peaks["private"] / cuda_peaks["plain"]
    if cfg.profile:
        extra["profile"] = {"plain": _profile(plain_step), "private": _profile(lambda: engine.compute(batch, clip))}
    clear()
    return _result(cfg, times, peaks, method, base_rss, extra)


def _synced(fn: Callable[[], object], sync: Callable[[], None]) -> Callable[[], None]:
    def step() -> None:
        fn()
        sync()

    return step


def _cuda_peak_bytes(fn: Callable[[], object], device: str) -> int:
    import torch

    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device))


# ------------------------------------------------------------------------------------------ opacus reference


def _dense_model(cfg: Config):
    """A dense pre-LN transformer classifier of the MoE config's width/depth built from modules Opacus
    supports (Embedding, Linear, LayerNorm; attention as Linear q/k/v/o + scaled_dot_product_attention)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    d, h, ff = cfg.hidden_size, cfg.num_heads, cfg.top_k * cfg.expert_intermediate

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.up, self.down = nn.Linear(d, ff), nn.Linear(ff, d)

        def forward(self, x_BTD, bias_B1TT):
            B, T, _ = x_BTD.shape
            y = self.ln1(x_BTD)
            q, k, v = (lin(y).view(B, T, h, d // h).transpose(1, 2) for lin in (self.q, self.k, self.v))
            att = F.scaled_dot_product_attention(q, k, v, attn_mask=bias_B1TT)
            x_BTD = x_BTD + self.o(att.transpose(1, 2).reshape(B, T, d))
            return x_BTD + self.down(F.gelu(self.up(self.ln2(x_BTD))))

    class DenseClassifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(cfg.vocab_size, d)
            self.pos = nn.Embedding(max(256, cfg.seq_len), d)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.num_layers))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, 2)

        def forward(self, ids_BT, mask_BT):
            B, T = ids_BT.shape
            pos_BT = torch.arange(T).expand(B, T)
            x = self.tok(ids_BT) + self.pos(pos_BT)
            m = mask_BT.to(x.dtype)
            bias = ((1.0 - m) * -1e9)[:, None, None, :].expand(B, 1, T, T)
            for block in self.blocks:
                x = block(x, bias)
            x = self.ln(x)
            pooled = (x * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp(min=1.0)
            return self.head(pooled)

    with torch.random.fork_rng(devices=[]):
        model = DenseClassifier()
    gen = torch.Generator().manual_seed(cfg.seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.02 if p.ndim >= 2 else p)
    return model


def opacus_worker(cfg: Config) -> dict:
    """Opacus (hooks, DPOptimizer clip+accumulate, noise 0) vs plain on the dense reference model."""
    import copy
    import warnings

    import torch
    import torch.nn.functional as F
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    torch.set_num_threads(cfg.threads)
    warnings.filterwarnings("ignore")
    base = _dense_model(cfg)
    plain_model = copy.deepcopy(base)
    gsm = GradSampleModule(base, batch_first=True, loss_reduction="mean")
    optimizer = DPOptimizer(torch.optim.SGD(gsm.parameters(), lr=0.0), noise_multiplier=0.0, max_grad_norm=cfg.clip_norm,
                            expected_batch_size=cfg.batch_size)
    batch = _batch(cfg)
    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]

    def clear() -> None:
        optimizer.zero_grad(set_to_none=True)
        plain_model.zero_grad(set_to_none=True)

    def plain_step() -> None:
        plain_model.zero_grad(set_to_none=True)
        F.cross_entropy(plain_model(ids, mask), labels).backward()

    def opacus_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(gsm(ids, mask), labels).backward()
        optimizer.pre_step()  # per-sample norms, clipping, clipped sum, (zero) noise into p.grad

    steps = {"plain": plain_step, "private": opacus_step}
    times = _common.run_interleaved(steps, warmup=cfg.warmup, reps=cfg.reps, clocks=CLOCKS)
    clear()
    base_rss, peaks, method = _measure_memory(steps, clear)
    extra = {"kind": "opacus_dense", "num_params": sum(p.numel() for p in plain_model.parameters()),
             "dense_mlp_width": cfg.top_k * cfg.expert_intermediate}
    clear()
    return _result(cfg, times, peaks, method, base_rss, extra)


def run_config(cfg: Config) -> dict:
    if cfg.family == "opacus_dense":
        return opacus_worker(cfg)
    return ops_worker(cfg) if cfg.ops_only else moe_worker(cfg)


# ------------------------------------------------------------------------------------------ plan and report


MEDIUM = dict(hidden_size=256, num_layers=4, num_heads=4, num_experts=16, top_k=2, expert_intermediate=256,
              vocab_size=1024, batch_size=16, seq_len=128)
# Each real model's expert count, top-k, shared experts, depth, heads and sequence length, scaled down in
# width only (hidden size and expert width divided by the factor in the comment), vocabulary 1024.
REAL_SHAPES = {
    # allenai/OLMoE-1B-7B: 16 layers, d 2048, 16 heads, 64 experts of width 1024, top-8 (width / 16)
    "OLMoE-1B-7B": dict(family="olmoe", hidden_size=128, num_layers=16, num_heads=16, num_experts=64, top_k=8,
                        expert_intermediate=64, seq_len=128),
    # deepseek-ai/deepseek-vl2-tiny (language part): 12 layers, d 1280, 10 heads, 64 routed experts of width
    # 896, top-6, 2 shared experts, first layer dense (width / 8)
    "DeepSeek-VL2-Tiny": dict(family="deepseek_v2", hidden_size=160, num_layers=12, num_heads=10, num_experts=64,
                              top_k=6, expert_intermediate=112, seq_len=128,
                              overrides=(("n_shared_experts", 2), ("first_k_dense_replace", 1))),
    # google/switch-base-8 (encoder): 12 layers, every other one sparse, d 768, 12 heads, 8 experts of width
    # 3072, top-1, T 512 (width / 8)
    "Switch-base-8": dict(family="switch_transformers", hidden_size=96, num_layers=12, num_heads=12, num_experts=8,
                          top_k=1, expert_intermediate=384, seq_len=512, overrides=(("encoder_sparse_step", 2),)),
}
QUICK = dict(hidden_size=32, num_layers=2, num_heads=4, num_experts=4, top_k=2, expert_intermediate=32,
             vocab_size=256, batch_size=4, seq_len=16)


def plan(*, quick: bool, families: Sequence[str], sweep_families: Sequence[str], experts: Sequence[int],
         seq_lens: Sequence[int], warmup: int, reps: int, sweep_reps: int, threads: int, profile: Sequence[str],
         opacus: bool, top_ks: Sequence[int] = (), real: Sequence[str] = (), device: str = "cpu",
         dtype: str = "float32", ops_only: bool = False) -> list[Config]:
    """The configurations of one run: the base config per family, E and T sweeps, the Opacus reference."""
    base = QUICK if quick else MEDIUM
    common = dict(warmup=warmup, threads=threads, device=device, dtype=dtype, ops_only=ops_only)
    configs: list[Config] = []
    for fam in families:
        configs.append(Config(fam, **base, reps=reps, profile=fam in profile, tags=("base",), **common))
    for fam in sweep_families:
        for e in experts:
            if e != base["num_experts"] or fam not in families:
                configs.append(Config(fam, **dict(base, num_experts=e, top_k=min(base["top_k"], e)), reps=sweep_reps,
                                      tags=("sweep_experts",), **common))
        for t in seq_lens:
            if t != base["seq_len"] or fam not in families:
                configs.append(Config(fam, **dict(base, seq_len=t), reps=sweep_reps, tags=("sweep_seq",), **common))
        if fam != "switch_transformers":  # top-1 by construction
            e = max(experts)
            for k in top_ks:
                configs.append(Config(fam, **dict(base, num_experts=e, top_k=min(k, e)), reps=sweep_reps,
                                      tags=("sweep_topk",), **common))
    for name in real:
        shape = dict(REAL_SHAPES[name])
        fam = shape.pop("family")
        configs.append(Config(fam, **dict(base, vocab_size=1024, **shape), name=name, reps=sweep_reps,
                              tags=("real_shape",), **common))
    if opacus and not ops_only:
        if (device, dtype) != ("cpu", "float32"):
            raise ValueError("the Opacus reference runs on CPU in float32; add --no-opacus with --device/--dtype")
        configs.append(Config("opacus_dense", **base, reps=reps, tags=("opacus",), **dict(common, ops_only=False)))
    return configs


def _row(r: dict) -> dict:
    c = r.get("config", {})
    row = {"family": c.get("name") or c.get("family"), "E": c.get("num_experts"), "k": c.get("top_k"),
           "T": c.get("seq_len"), "B": c.get("batch_size"),
           "tags": ",".join(c.get("tags", ()))}
    if "error" in r:
        row["error"] = r["error"].splitlines()[-1][:80] if r["error"] else "error"
        return row
    if "aten_ops" in r:
        ops = r["aten_ops"]
        row.update(plain_ops=ops["plain"]["all"], private_ops=ops["private"]["all"], ops_ratio=r["aten_op_ratio"],
                   kernel_ratio=r["kernel_ratio"], private_syncs=ops["private"]["syncs"])
    if "time_s" not in r:
        return row
    t = r["time_s"]
    row.update(plain_s=t["plain"]["median"], plain_iqr=t["plain"]["iqr"], private_s=t["private"]["median"],
               private_iqr=t["private"]["iqr"], time_ratio=r["time_ratio"], cpu_ratio=r.get("cpu_time_ratio"),
               paired_ratio=r.get("time_ratio_paired"), mem_ratio=r["mem_ratio"],
               mem_tensor=r.get("mem_ratio_tensor"),
               mem_total=r["mem_ratio_total"],
               mem_plain_mb=r["mem_bytes"]["plain_peak_increase"] / 2**20,
               mem_private_mb=r["mem_bytes"]["private_peak_increase"] / 2**20)
    return row


COLUMNS = (("family", "family"), ("E", "E"), ("k", "k"), ("T", "T"), ("B", "B"), ("plain_s", "plain s"), ("plain_iqr", "iqr"),
           ("private_s", "private s"), ("private_iqr", "iqr"), ("time_ratio", "time x"),
           ("paired_ratio", "paired x"), ("cpu_ratio", "cpu x"),
           ("mem_plain_mb", "plain MB"), ("mem_private_mb", "private MB"), ("mem_ratio", "mem x"),
           ("mem_tensor", "tensor mem x"),
           ("mem_total", "mem total x"), ("plain_ops", "plain ops"), ("private_ops", "private ops"),
           ("ops_ratio", "ops x"), ("kernel_ratio", "kernels x"), ("private_syncs", "syncs"), ("error", "error"))


def report_table(results: Sequence[dict]) -> str:
    rows = [_row(r) for r in results]
    cols = [c for c in COLUMNS if c[0] in ("family", "E", "k", "T", "B") or any(c[0] in r for r in rows)]
    return _common.format_table(rows, cols)


GIT_TIMEOUT_S = 10.0


def _engine_revision() -> dict:
    """The commit and whether the engine's sources differ from it (the benchmark measures the working tree).
    Both are None where git is missing, hangs past ``GIT_TIMEOUT_S`` or the tree is not a repository."""
    import subprocess

    root = _HERE.parent

    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False,
                                  timeout=GIT_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    import hashlib

    status = git("status", "--porcelain", "--", "src/raptor/per_sample", "src/raptor/moe", "src/raptor/roles")
    digest = hashlib.sha256()
    for path in sorted((root / "src" / "raptor").glob("per_sample/*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return {"commit": git("rev-parse", "HEAD"), "engine_sources_modified": None if status is None else bool(status),
            "per_sample_sha256": digest.hexdigest()[:16]}


def run_benchmark(configs: Sequence[Config], *, in_process: bool = False, timeout: float = 600.0,
                  log: Callable[[str], None] = print, partial_out: Path | None = None) -> dict:
    """Run every configuration (each in a fresh subprocess unless ``in_process``) and collect the JSON.

    ``partial_out``: the report so far is written there after every configuration (``"complete":
    false`` until the last), so a run stopped at any point leaves its results."""
    import torch

    results = []
    load_at_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    t_start = time.perf_counter()
    revision = _engine_revision()

    def report(complete: bool) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "benchmark": "engine_speed",
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "complete": complete,
            "wall_s": time.perf_counter() - t_start,
            "threads": configs[0].threads if configs else None,
            "in_process": in_process,
            "environment": {"python": platform.python_version(), "torch": torch.__version__,
                            "machine": platform.machine(), "processor": platform.processor(),
                            "cpu_count": os.cpu_count(), "load_avg_at_start": load_at_start,
                            "load_avg_at_end": os.getloadavg() if hasattr(os, "getloadavg") else None,
                            "cuda": torch.version.cuda,
                            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                            **revision},
            "results": results,
        }

    for cfg in configs:
        t0 = time.perf_counter()
        if in_process:
            try:
                result = run_config(cfg)
            except Exception as err:  # reported in the JSON and the exit status, not swallowed
                result = {"config": asdict(cfg), "error": f"{type(err).__name__}: {err}"}
        else:
            result = _common.run_worker(Path(__file__), {"config": asdict(cfg)}, timeout=timeout)
            result.setdefault("config", asdict(cfg))
        results.append(result)
        if "error" in result:
            summary = "ERROR " + result["error"].splitlines()[-1][:200]
        elif "time_ratio" in result:
            summary = f"time x{result['time_ratio']:.2f} mem x{result['mem_ratio'] or math.nan:.2f}"
        else:
            summary = ""
        if "aten_op_ratio" in result:
            summary += f" ops x{result['aten_op_ratio']:.2f} kernels x{result['kernel_ratio']:.2f}"
        log(f"[{time.perf_counter() - t0:6.1f}s] {cfg.label}: {summary}")
        if partial_out is not None:
            partial_out.parent.mkdir(parents=True, exist_ok=True)
            partial_out.write_text(json.dumps(report(False), indent=1) + "\n")
    return report(True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    add_arguments(p)
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return p


def add_arguments(p: argparse.ArgumentParser, *, quick_default: bool = False) -> None:
    p.add_argument("--quick", action="store_true", default=quick_default,
                   help="tiny sizes (d=32, 2 layers, E=4, T=16, B=4) for a smoke run")
    p.add_argument("--families", nargs="*", default=list(FAMILIES), choices=FAMILIES, metavar="FAMILY",
                   help="families at the base config (default: all seven)")
    p.add_argument("--sweep-families", nargs="*", default=None, metavar="FAMILY",
                   help="families for the E and T sweeps (default: switch_transformers olmoe; quick: none)")
    p.add_argument("--experts", nargs="+", type=int, default=None,
                   help="E sweep (default 4 8 16 32 64; quick 2 4)")
    p.add_argument("--seq-lens", nargs="+", type=int, default=None, help="T sweep (default 32 64 128 512; quick 8 16)")
    p.add_argument("--top-ks", nargs="*", type=int, default=None,
                   help="top-k sweep at the largest E for top-k families (default 6 8; quick none)")
    p.add_argument("--real", nargs="*", default=None, choices=sorted(REAL_SHAPES), metavar="MODEL",
                   help=f"real-model shapes, scaled in width only (default: all of {', '.join(REAL_SHAPES)}; "
                        "quick: none)")
    p.add_argument("--reps", type=int, default=None, help="timed rounds per base config (default 4; quick 2)")
    p.add_argument("--sweep-reps", type=int, default=None, help="timed rounds per sweep config (default 4; quick 1)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads in every worker (default 1)")
    p.add_argument("--profile", nargs="*", default=None, metavar="FAMILY",
                   help="families whose base config also gets torch.profiler top ops (default: all; quick: none)")
    p.add_argument("--no-opacus", action="store_true", help="skip the Opacus dense reference")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda: steps synchronised, peak CUDA memory")
    p.add_argument("--dtype", nargs="+", choices=("float32", "bfloat16"), default=["float32"],
                   help="weights and activations; several: every configuration in each, in one run")
    p.add_argument("--in-process", action="store_true", help="run configurations in this process (no subprocess)")
    p.add_argument("--ops-only", action="store_true",
                   help="only count the ATen ops (kernels) of the plain and the private step: no timing, no memory "
                        "(a device-free proxy of GPU launch overhead; every run also records them)")
    p.add_argument("--out", type=Path, default=None, help=f"JSON output path (default {DEFAULT_OUT}; quick: none)")


def configs_from_args(args: argparse.Namespace) -> list[Config]:
    quick = args.quick
    sweep = args.sweep_families if args.sweep_families is not None else ([] if quick else ["switch_transformers",
                                                                                            "olmoe"])
    profile = args.profile if args.profile is not None else ([] if quick else list(args.families))
    dtypes = [args.dtype] if isinstance(args.dtype, str) else list(args.dtype)
    # the Opacus reference (float32 only) once, with the first dtype
    return [cfg for i, dtype in enumerate(dtypes)
            for cfg in _plan_from_args(args, quick, sweep, profile, dtype, opacus=not args.no_opacus and i == 0)]


def _plan_from_args(args: argparse.Namespace, quick: bool, sweep: list, profile: list, dtype: str, *,
                    opacus: bool) -> list[Config]:
    return plan(quick=quick, families=args.families, sweep_families=sweep,
                experts=args.experts or ([2, 4] if quick else [4, 8, 16, 32, 64]),
                seq_lens=args.seq_lens or ([8, 16] if quick else [32, 64, 128, 512]),
                top_ks=args.top_ks if args.top_ks is not None else ([] if quick else [6, 8]),
                real=args.real if args.real is not None else ([] if quick else list(REAL_SHAPES)),
                warmup=args.warmup, reps=args.reps or (2 if quick else 4), sweep_reps=args.sweep_reps or (1 if quick else 4),
                threads=args.threads, profile=profile, opacus=opacus, device=args.device,
                dtype=dtype, ops_only=args.ops_only)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.worker is not None:
        spec = json.loads(args.worker)
        c = spec["config"]
        c["tags"] = tuple(c.get("tags", ()))
        c["overrides"] = tuple(tuple(x) for x in c.get("overrides", ()))
        print(json.dumps(run_config(Config(**c))))
        return 0
    configs = configs_from_args(args)
    out = args.out if args.out is not None else (None if args.quick else OPS_OUT if args.ops_only else DEFAULT_OUT)
    report = run_benchmark(configs, in_process=args.in_process, log=lambda s: print(s, flush=True), partial_out=out)
    print()
    print(f"threads={report['threads']}  (ratios = median(private) / median(plain), measured in one process)")
    print(report_table(report["results"]))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1) + "\n")
        print(f"\nwrote {out}")
    return 0 if all("error" not in r for r in report["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
