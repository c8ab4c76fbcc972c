"""Audit reports: one line next to the claim, a JSON file, and a PNG of in vs out score distributions."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from raptor.evaluation.figures import save_figure
from raptor.training.saving.json_io import write_strict_json


def write_json(path: Path, payload: dict) -> Path:
    return write_strict_json(path, payload)


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
    return save_figure(fig, path)
