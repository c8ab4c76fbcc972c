"""A PNG of routing per MoE layer, before and after pre-training: expert load shares (stacked bars)
and entropies (load entropy / log E, and token-expert mutual information / log E).

Needs matplotlib (``pip install 'raptor-dp[plot]'``); :func:`plot_routing` returns ``None``
without it.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path


def plot_routing(report: dict, path: str | Path, corpus: str = "public_held_out") -> Path | None:
    """Write the figure for ``report["routing_before"/"routing_after"][corpus]`` to ``path``."""
    if importlib.util.find_spec("matplotlib") is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    before = report["routing_before"][corpus]
    after = report["routing_after"][corpus]
    layers = sorted(before, key=int)
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    for ax, stats, title in ((axes[0], before, "before"), (axes[1], after, "after")):
        bottom = [0.0] * len(layers)
        E = stats[layers[0]]["num_experts"]
        cmap = plt.get_cmap("tab20", E)
        for e in range(E):
            shares = [stats[layer]["load_shares"][e] for layer in layers]
            ax.bar(layers, shares, bottom=bottom, color=cmap(e), label=f"expert {e}" if title == "after" else None)
            bottom = [b + s for b, s in zip(bottom, shares)]
        ax.set_title(f"expert load shares per layer, {title} pre-training")
        ax.set_xlabel("MoE layer")
        ax.set_ylim(0, 1)
    axes[0].set_ylabel("share of token assignments")
    axes[1].legend(fontsize=7, ncol=2, loc="upper right")
    ax = axes[2]
    for stats, style, title in ((before, "--", "before"), (after, "-", "after")):
        logE = [math.log(stats[layer]["num_experts"]) for layer in layers]
        ax.plot(layers, [stats[layer]["load_entropy"] / le for layer, le in zip(layers, logE)], style, marker="o",
                color="tab:blue", label=f"load entropy / log E ({title})")
        ax.plot(layers, [stats[layer]["token_expert_mutual_information"] / le for layer, le in zip(layers, logE)],
                style, marker="s", color="tab:red", label=f"soft token-expert MI / log E ({title})")
        if "top1_token_mutual_information_corrected" in stats[layers[0]]:
            ax.plot(layers, [stats[layer]["top1_token_mutual_information_corrected"] / le
                             for layer, le in zip(layers, logE)],
                    style, marker="^", color="tab:green", label=f"top-1 token-expert MI / log E ({title})")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("MoE layer")
    ax.set_title("balance (load entropy) and specialisation (MI)")
    ax.legend(fontsize=7)
    fig.suptitle(f"routing on {corpus.replace('_', ' ')} text")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
