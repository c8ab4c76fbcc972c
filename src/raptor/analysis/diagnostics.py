"""The three failure modes of dense DP-SGD on an MoE (METHOD.md), measured on PUBLIC data.

For a model with its trainable set already chosen (experts of ``trained_layers`` trainable, other
experts frozen), one pass over public batches with two engines gives:

1. **Suppression.** Per public record, the owner-expert share of its squared gradient norm,
   s = sum_l ||g_{l,o}||^2 / (||g_shared||^2 + sum_l ||g_{l,o}||^2), and the factor that one
   global clip C applies to the expert part, min(1, C / ||g||), against the per-role factor
   min(1, C_e / ||g_{l,o}||). (Norms from the role-grouped engine; the global norm ||g|| is the
   dense engine's, which also counts non-owner expert paths.)
2. **Dilution.** Dividing an expert's sum by B instead of by n_e = B pi_e shrinks its update by
   pi_e: the factor is the public load share itself, reported per expert (RAPTOR's n_hat = B pi_hat
   gives pi_e / pi_hat_e, 1 on the public corpus by construction).
3. **Low-load SNR.** Per expert, the expected clipped-sum signal at the expected batch size B,
   ||E[sum_{i in S} g_bar_i restricted to e]|| ~ (B / n_public) * ||sum over the public records||,
   against the noise norm sigma * C * sqrt(d_e): dense DP-SGD (global clip, one sigma) vs RAPTOR
   (per-role clip C_e, sigma_e). Plotted against the public load.

Privacy: every input is public (public records, a model that is public before fine-tuning,
hyperparameters). Do not run this on private records: owners, counts and norms of private records
are private statistics.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from raptor.roles.groups import GroupKey


def _slice_sq_norm(sums: Mapping[str, torch.Tensor], slices) -> float:
    total = 0.0
    for sl in slices:
        t = sums.get(sl.name)
        if t is None:
            continue
        v = t if sl.index is None else t[sl.index]
        total += float(v.double().pow(2).sum())
    return total


def _numel(params: Mapping[str, nn.Parameter], slices) -> int:
    n = 0
    for sl in slices:
        p = params[sl.name]
        n += p.numel() if sl.index is None else p[sl.index].numel()
    return n


def failure_mode_diagnostics(
    model: nn.Module,
    public_batches: Iterable[Mapping[str, torch.Tensor]],
    *,
    trained_layers: Sequence[int],
    batch_size: int,
    clip_dense: float,
    clip_shared: float,
    clip_expert: float | Mapping[GroupKey, float],
    sigma_dense: float,
    sigma_shared: float,
    sigma_expert: float,
    loss_fn=None,
) -> dict:
    """Suppression, dilution and SNR per expert of ``trained_layers`` on public batches (see module doc)."""
    from raptor.per_sample.engine import PerRecordEngine

    kwargs = {} if loss_fn is None else {"loss_fn": loss_fn}
    roles = PerRecordEngine(model, trained_layers=trained_layers, grouping="roles", **kwargs)
    dense = PerRecordEngine(model, trained_layers=(), grouping="dense", **kwargs)
    expert_keys = [k for k in roles.group_keys if k.is_expert and roles.group_map.groups[k]]
    clips = {k: float(clip_expert if isinstance(clip_expert, (int, float)) else clip_expert[k]) for k in expert_keys}
    clip_table = {GroupKey.shared(): clip_shared, **clips}
    clip_table.update({k: 1.0 for k in roles.group_keys if k not in clip_table})

    acc = _accumulate(roles, dense, public_batches, trained_layers, clip_table, clips, clip_dense)
    per_expert = _per_expert(roles, acc, expert_keys, clips, batch_size=batch_size, clip_dense=clip_dense,
                             sigma_dense=sigma_dense, sigma_expert=sigma_expert)
    n_public, shares_of_norm = acc.n_public, acc.shares_of_norm
    global_factor, role_factor = acc.global_factor, acc.role_factor

    def q(values, p):
        if not values:
            return None
        t = torch.tensor(values, dtype=torch.float64)
        return float(torch.quantile(t, p))

    return {
        "public_records": n_public,
        "trained_layers": list(trained_layers),
        "suppression": {
            "expert_share_of_sq_norm": {"median": q(shares_of_norm, 0.5), "p10": q(shares_of_norm, 0.1),
                                        "p90": q(shares_of_norm, 0.9), "values": shares_of_norm},
            "global_clip_factor": {"median": q(global_factor, 0.5), "values": global_factor},
            "role_clip_factor": {"median": q(role_factor, 0.5), "values": role_factor},
            "clip_dense": clip_dense, "clip_shared": clip_shared,
        },
        "experts": per_expert,
        "sigmas": {"dense": sigma_dense, "shared": sigma_shared, "expert": sigma_expert},
        "batch_size": batch_size,
        "note": ("signal = (B / public records) * ||clipped sum over the public records|| restricted to the "
                 "expert; RAPTOR's signal is before the n_hat division, dense DP-SGD's before the B division: "
                 "both are then compared with their own noise norm sigma*C*sqrt(d_e)."),
    }


def _display_exponent(largest: float) -> int:
    """The power of ten that brings values up to ``largest`` into [1, 1000) for an axis (0 when they
    already read well), so the factor goes in the label instead of matplotlib's offset text, which
    overlaps the label."""
    if not math.isfinite(largest) or largest <= 0 or largest >= 1e-2:
        return 0
    return int(math.floor(math.log10(largest)))


def failure_modes_title(diag: Mapping, task: str) -> str:
    """The figure title, from the diagnostics JSON alone (so a figure can be redrawn from it)."""
    return (f"{diag['model']} / {task}, public records, eps {diag['epsilon']:g} (delta {diag['delta']:g}), "
            f"B {diag['batch_size']}, {diag['steps']} steps, trained layer(s) {list(diag['trained_layers'])}")


def plot_failure_modes(diag: Mapping, path: str | Path, *, title: str = "") -> Path:
    """Three panels: expert share of ||g||^2 (suppression), load share = dilution factor under B, and
    per-expert SNR against public load for dense DP-SGD and RAPTOR; a fourth, first, when ``diag``
    carries ``composition`` (:func:`raptor.analysis.composition.gradient_composition`): the median
    per-record ||g|| of each role of the trainable set, and its share of one clipped vector."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    comp = diag.get("composition")
    if comp:
        fig, (z, a, b, c) = plt.subplots(1, 4, figsize=(19, 4))
        rows = [(k, v) for k, v in comp["roles"].items() if v["trained"]]
        z.barh([k for k, _ in rows], [max(v["median"], 1e-12) for _, v in rows], color="tab:gray")
        z.set_xscale("log")
        z.invert_yaxis()
        for i, (_, v) in enumerate(rows):
            z.text(max(v["median"], 1e-12), i, f" {v['median']:.2g} ({v['median_share_of_clipped']:.1g})",
                   va="center", fontsize=6)
        z.set_xlabel("median per-record ||g|| (share of one clipped vector)")
        z.set_title(f"0. composition: whole set {comp['total']['median']:.3g}", fontsize=9)
    else:
        fig, (a, b, c) = plt.subplots(1, 3, figsize=(14, 4))
    sup = diag["suppression"]
    shares = list(sup["expert_share_of_sq_norm"]["values"])
    exponent = _display_exponent(max(shares, default=0.0))
    a.hist([v / 10.0**exponent for v in shares], bins=30, color="tab:blue", alpha=0.8)
    unit = f" (x 1e{exponent})" if exponent else ""
    a.set_xlabel(f"owner-expert share of ||g_i||^2{unit}, public records")
    a.set_ylabel("records")
    a.set_title(f"1. suppression: median global clip factor {sup['global_clip_factor']['median'] or 0:.2f}"
                f"\nvs per-role {sup['role_clip_factor']['median'] or 0:.2f}", fontsize=9)
    experts = diag["experts"]
    loads = [e["public_load"] for e in experts]
    labels = [f"{e['layer']}/{e['expert']}" for e in experts]
    b.bar(range(len(experts)), loads, color="tab:orange")
    b.axhline(1.0, color="tab:red", linestyle="--", label="n_hat = B*pi_hat (RAPTOR): 1")
    b.set_xticks(range(len(experts)), labels, rotation=90, fontsize=6)
    b.set_ylabel("update scale relative to n_e (dilution under B)")
    b.set_title("2. dilution: dividing by B scales expert e by pi_e", fontsize=9)
    b.legend(fontsize=7)
    c.scatter(loads, [e["snr_dense"] for e in experts], label="dense DP-SGD", color="tab:blue")
    c.scatter(loads, [e["snr_raptor"] for e in experts], label="RAPTOR", color="tab:red", marker="^")
    c.set_xlabel("public load pi_e")
    c.set_ylabel("per-expert SNR at batch B")
    c.set_yscale("log")
    c.set_title("3. low-load SNR", fontsize=9)
    c.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    from raptor.analysis.paper_table import save_figure

    return save_figure(fig, path)


@dataclass
class _Accumulated:
    """What one pass over the public batches collects for :func:`failure_mode_diagnostics`."""

    counts: dict
    n_public: int = 0
    shares_of_norm: list = field(default_factory=list)
    global_factor: list = field(default_factory=list)
    role_factor: list = field(default_factory=list)
    roles_sums: dict = field(default_factory=dict)
    dense_sums: dict = field(default_factory=dict)


def _accumulate(roles, dense, public_batches, trained_layers, clip_table, clips, clip_dense) -> _Accumulated:
    """Both engines over the public batches: clipped sums (float64), owner counts, each record's expert
    share of its squared norm and its clip factors under one global clip and under per-role clips."""
    acc = _Accumulated(counts=dict.fromkeys(clips, 0))
    for batch in public_batches:
        B = int(batch["input_ids"].shape[0])
        if B == 0:
            continue
        acc.n_public += B
        r = roles.compute(batch, clip_table)
        d = dense.compute(batch, {GroupKey.dense(): clip_dense})
        for sums, res in ((acc.roles_sums, r.clipped_sums), (acc.dense_sums, d.clipped_sums)):
            for name, t in res.items():
                sums[name] = t.detach().double() if name not in sums else sums[name] + t.detach().double()
        g_shared = r.norms[GroupKey.shared()].double()
        g_dense = d.norms[GroupKey.dense()].double()
        expert_sq = torch.zeros(B, dtype=torch.float64, device=g_shared.device)  # beside the engine's norms
        for layer in trained_layers:
            owners = r.owners[layer]
            for i in range(B):
                key = GroupKey.expert(layer, int(owners[i]))
                if key not in acc.counts:
                    continue
                acc.counts[key] += 1
                ge = float(r.norms[key][i])
                expert_sq[i] += ge ** 2
                acc.role_factor.append(min(1.0, clips[key] / ge) if ge > 0 else 1.0)
                acc.global_factor.append(min(1.0, clip_dense / float(g_dense[i])) if g_dense[i] > 0 else 1.0)
        total = g_shared.pow(2) + expert_sq
        acc.shares_of_norm.extend((expert_sq / total.clamp_min(1e-300)).tolist())
    return acc


def _per_expert(roles, acc: _Accumulated, expert_keys, clips, *, batch_size, clip_dense, sigma_dense,
                sigma_expert) -> list[dict]:
    """Per expert: public load, dilution, and signal, noise and SNR under dense DP-SGD and RAPTOR."""
    params = roles.group_map.params
    scale = batch_size / max(acc.n_public, 1)
    out = []
    for key in expert_keys:
        slices = roles.group_map.groups[key]
        d_e = _numel(params, slices)
        load = acc.counts[key] / max(acc.n_public, 1)
        sig_raptor = math.sqrt(_slice_sq_norm(acc.roles_sums, slices)) * scale
        sig_dense = math.sqrt(_slice_sq_norm(acc.dense_sums, slices)) * scale
        noise_raptor = sigma_expert * clips[key] * math.sqrt(d_e)
        noise_dense = float(sigma_dense) * clip_dense * math.sqrt(d_e)
        out.append({
            "layer": key.layer, "expert": key.expert_id, "public_load": load, "params": d_e,
            "dilution_factor_B": load, "dilution_factor_nhat": 1.0,
            "signal_dense": sig_dense, "noise_dense": noise_dense,
            "snr_dense": sig_dense / noise_dense if noise_dense > 0 else math.inf,
            "signal_raptor": sig_raptor, "noise_raptor": noise_raptor,
            "snr_raptor": sig_raptor / noise_raptor if noise_raptor > 0 else math.inf,
        })
    return out
