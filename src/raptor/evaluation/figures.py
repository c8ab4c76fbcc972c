"""One way to write a matplotlib figure (the audit and the experiment reports share it)."""

from __future__ import annotations

from pathlib import Path


def save_figure(fig, path) -> Path:
    """Lay out ``fig``, write it to ``path`` (parent folders created) at 120 dpi and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
