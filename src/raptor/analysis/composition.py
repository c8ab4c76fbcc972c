"""Gradient composition: which parts of a model carry a record's gradient, and what one clip leaves them.

For a model, a task and a trainable set, on PUBLIC records, one record at a time with plain
autograd (the obviously-correct path; no engine), per record r and role g:

* ``head``: the output head; ``embeddings``: the input embedding table; ``attention``: every
  other shared parameter (attention, norms, position/relative biases, dense MLPs, shared experts,
  and the LoRA adapters on them); ``routers``; ``experts/L``: all experts of MoE layer L;
  ``owner/L``: the record's owner expert in layer L (its slice of ``experts/L``);
* ||g_{r,g}|| and the squared share ||g_{r,g}||^2 / ||g_r||^2 of the whole trainable set;
* under ONE global clip C (DP-SGD's; default: the median public ||g_r||, a typical choice), the
  norm a group keeps, ||g_{r,g}|| min(1, C / ||g_r||), and its share of the clipped vector
  ||g_{r,g}|| / ||g_r||: the budget each group gets when all are clipped together.

:func:`gradient_composition` returns medians (and p10/p90) per role; ``experiments/composition.py``
is the command and draws the PNG. It is the first thing to look at before choosing a method: a
group whose share is ~0 gets ~nothing from one clip, whatever its own signal.

Privacy: public records and the public initial weights only. Do not run it on private records:
their norms and owners are private statistics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from torch import nn

ROLE_ORDER = ("head", "embeddings", "attention", "routers")


def _base(model: nn.Module) -> nn.Module:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def parameter_roles(model: nn.Module) -> dict[int, tuple[str, int | None]]:
    """{id(param): (role, MoE layer or None)} for every parameter of ``model`` (a PEFT wrapper
    looked through): ``head``, ``embeddings``, ``routers``, ``experts`` (with its layer) or
    ``attention`` (everything else)."""
    from raptor.moe.adapters import get_adapter
    from raptor.training.setup.trainable import head_prefixes

    base = _base(model)
    roles: dict[int, tuple[str, int | None]] = {}
    modules = dict(base.named_modules())
    for prefix in head_prefixes(base):
        for p in modules[prefix].parameters():
            roles[id(p)] = ("head", None)
    for p in base.get_input_embeddings().parameters():
        roles.setdefault(id(p), ("embeddings", None))
    for info in get_adapter(base).moe_layers(base):
        for p in info.router.parameters():
            roles.setdefault(id(p), ("routers", info.index))
        for p in info.experts.parameters():
            roles.setdefault(id(p), ("experts", info.index))
    for p in base.parameters():
        roles.setdefault(id(p), ("attention", None))
    return roles


def _owner_slices(model: nn.Module) -> dict[int, list[tuple[nn.Parameter, int | None, int]]]:
    """{layer: [(param, dim-0 expert slot or None, expert id)]}: how to cut one expert's gradient."""
    from raptor.moe.adapters import get_adapter

    base = _base(model)
    out: dict[int, list] = {}
    for info in get_adapter(base).moe_layers(base):
        rows = []
        if info.fused:
            for p in info.experts.parameters(recurse=False):
                if p.ndim == 3:
                    rows += [(p, e, e) for e in range(info.num_experts)]
        else:
            for e, (_, child) in enumerate(info.experts.named_children()):
                rows += [(p, None, e) for p in child.parameters()]
        out[info.index] = rows
    return out


def _quantiles(values: torch.Tensor) -> dict:
    v = values[torch.isfinite(values)].double()
    if v.numel() == 0:
        return {"median": float("nan"), "p10": float("nan"), "p90": float("nan")}
    q = torch.quantile(v, torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)).tolist()
    return {"p10": q[0], "median": q[1], "p90": q[2]}


def gradient_composition(model: nn.Module, records: Mapping[str, torch.Tensor], *,
                         trainable: Sequence[str] | None = None, clip: float | None = None,
                         max_records: int = 256, loss_fn=None) -> dict:
    """Per-role per-record gradient norms on ``records`` (public), one record at a time.

    ``trainable``: names (as ``model.named_parameters()`` gives them) of the trainable set; None:
    every parameter (the whole model, routers included). ``clip``: the one global clip C (None:
    the median ||g_r|| of these records). Returns a JSON-able dict (see the module docstring).
    """
    from raptor.per_sample.engine import cross_entropy_per_record, model_inputs
    from raptor.training.config import TrainConfig
    from raptor.training.setup.public_stage import public_routing

    loss_fn = loss_fn or cross_entropy_per_record
    named = dict(model.named_parameters())
    names = list(named) if trainable is None else list(trainable)
    unknown = sorted(set(names) - set(named))
    if unknown:
        raise KeyError(f"not parameters of the model: {unknown[:3]}")
    params = [named[n] for n in names]
    roles = parameter_roles(model)
    slices = _owner_slices(model)
    saved = {n: p.requires_grad for n, p in named.items()}
    n = min(int(records["labels"].shape[0]), max_records)
    owners = public_routing(model, {k: v[:n] for k, v in records.items()}, TrainConfig())  # natural routing
    for p in named.values():  # gradients of the measured set only
        p.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    layers = sorted(slices)
    keys = [*ROLE_ORDER, *(f"experts/{L}" for L in layers), *(f"owner/{L}" for L in layers)]
    sq = {k: torch.zeros(n, dtype=torch.float64) for k in keys}
    total = torch.zeros(n, dtype=torch.float64)
    in_set = {id(p) for p in params}
    model.eval()
    try:
        for r in range(n):
            batch = {k: v[r:r + 1] for k, v in records.items()}
            logits = model(**model_inputs(batch)).logits
            loss = loss_fn(logits, batch["labels"]).sum()
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            by_id = {id(p): g for p, g in zip(params, grads)}
            for p, g in zip(params, grads):
                if g is None:
                    continue
                s = float(g.double().pow(2).sum())
                role, layer = roles[id(p)]
                sq[role if role != "experts" else f"experts/{layer}"][r] += s
                total[r] += s
            for L in layers:
                owner = int(owners[L][r])
                for p, slot, e in slices[L]:
                    g = by_id.get(id(p)) if id(p) in in_set else None
                    if g is None or e != owner:
                        continue
                    sq[f"owner/{L}"][r] += float((g if slot is None else g[slot]).double().pow(2).sum())
    finally:
        for name, p in named.items():
            p.requires_grad_(saved[name])
    norm = total.sqrt()
    C = float(torch.quantile(norm[norm > 0], 0.5)) if clip is None and bool((norm > 0).any()) else \
        float(clip if clip is not None else 1.0)
    factor = torch.clamp(C / norm.clamp_min(1e-30), max=1.0)
    out_roles = {}
    for k in keys:
        g = sq[k].sqrt()
        present = bool((g > 0).any())
        out_roles[k] = {**_quantiles(g), "trained": present,
                        "median_sq_share": float(torch.median(sq[k] / total.clamp_min(1e-300))),
                        "median_share_of_clipped": float(torch.median(g / norm.clamp_min(1e-300))),
                        "median_kept_norm": float(torch.median(g * factor))}
    return {"records": n, "clip": C, "clip_rule": "median public ||g||" if clip is None else "given",
            "total": _quantiles(norm), "median_clip_factor": float(torch.median(factor)),
            "roles": out_roles, "trainable_parameters": len(names)}


def plot_composition(result: Mapping, path: str | Path, title: str = "") -> Path:
    """Two panels: median per-record ||g|| per role (log scale), and each role's share of the
    clipped vector under one global clip."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(k, v) for k, v in result["roles"].items() if v["trained"] and math.isfinite(v["median"])]
    labels = [k for k, _ in rows]
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.45 * len(rows) + 1.8))
    ax = axes[0]
    ax.barh(labels, [max(v["median"], 1e-12) for _, v in rows], color="tab:blue")
    ax.axvline(result["total"]["median"], color="k", ls="--", lw=1, label=f"whole set {result['total']['median']:.3g}")
    ax.axvline(result["clip"], color="tab:red", ls=":", lw=1, label=f"one clip C = {result['clip']:.3g}")
    ax.set_xscale("log")
    ax.invert_yaxis()
    ax.set_xlabel("median per-record ||g|| (public records)")
    ax.legend(fontsize=8, loc="lower right")
    for i, (_, v) in enumerate(rows):
        ax.text(max(v["median"], 1e-12), i, f" {v['median']:.3g}", va="center", fontsize=7)
    ax = axes[1]
    shares = [max(v["median_share_of_clipped"], 1e-12) for _, v in rows]
    ax.barh(labels, shares, color="tab:orange")
    ax.set_xscale("log")
    ax.set_xlim(1e-6, 1.5)
    ax.invert_yaxis()
    ax.set_xlabel("share of the clipped vector under one clip (||g_group|| / ||g||)")
    for i, s in enumerate(shares):
        ax.text(s, i, f" {s:.2g}", va="center", fontsize=7)
    fig.suptitle(title or "gradient composition", fontsize=10)
    from raptor.analysis.paper_table import save_figure

    return save_figure(fig, path)
