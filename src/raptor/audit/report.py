"""Audit reports: one line next to the claim, a JSON file, and a PNG of in vs out score distributions."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np


def _finite(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, (np.floating, np.integer, np.bool_)):
        return _finite(obj.item())
    return obj


def write_json(path: Path, payload: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_finite(payload), indent=2, allow_nan=False) + "\n")
    return path


def plot_scores(path: Path, panels: dict[str, tuple[np.ndarray, np.ndarray]], title: str) -> Path:
    """One histogram panel per score: in (canary included/sampled) vs out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels), 3.6), squeeze=False)
    for ax, (name, (ins, outs)) in zip(axes[0], panels.items()):
        both = np.concatenate([ins, outs])
        lo, hi = np.quantile(both, [0.001, 0.999])
        bins = np.linspace(lo, hi, 60) if hi > lo else 30
        ax.hist(outs, bins=bins, alpha=0.55, density=True, label=f"out ({outs.size:,})", color="tab:blue")
        ax.hist(ins, bins=bins, alpha=0.55, density=True, label=f"in ({ins.size:,})", color="tab:orange")
        ax.set_xlabel(f"{name} score (higher = looks included)")
        ax.set_ylabel("density")
        ax.legend(frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
