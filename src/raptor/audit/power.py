"""The mechanism audit's power curve: how small a noise bug it catches.

For each stream (``shared``, ``expert``, both = ``joint``) and each factor f, the released noise of
that stream is divided by f while the plan and the claim keep sigma (a planted bug of size f), and
the mechanism audit scores what that stream releases against that stream's own claim (the
epsilon of its release alone; ``joint``: the step's ledger event). A point is *caught* when the
lower bound exceeds the claim. f = 1 (no bug) is the control: it must never be caught.

Privacy: the audit's records are synthetic.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from raptor.audit.mechanism import MechanismAuditConfig, run_mechanism_audit

POWER_STREAMS = ("shared", "expert", "joint")
POWER_FACTORS = (1.0, 1.25, 1.5, 2.0)


@dataclass(frozen=True)
class PowerPoint:
    stream: str
    factor: float
    seed: int
    claimed_epsilon: float
    epsilon_lower_bound: float

    @property
    def caught(self) -> bool:
        return self.epsilon_lower_bound > self.claimed_epsilon

    def to_dict(self) -> dict:
        return {"stream": self.stream, "factor": self.factor, "seed": self.seed,
                "claimed_epsilon": self.claimed_epsilon, "epsilon_lower_bound": self.epsilon_lower_bound,
                "caught": self.caught}


def power_point(base: MechanismAuditConfig, stream: str, factor: float, seed: int) -> PowerPoint:
    """One audit with ``stream``'s noise divided by ``factor`` (see the module docstring)."""
    cfg = replace(base, streams=stream, divided_streams=stream, noise_divisor=factor, seed=seed, variant="correct")
    res = run_mechanism_audit(cfg)
    return PowerPoint(stream, factor, seed, res.claimed_epsilon, res.epsilon_lower_bound)


def power_curve(base: MechanismAuditConfig | None = None, *, streams=POWER_STREAMS,
                factors=POWER_FACTORS, seeds=(0, 1, 2), progress=None) -> list[PowerPoint]:
    """Every (stream, factor, seed) point; ``progress`` (a callable) gets each point as it is done."""
    base = MechanismAuditConfig() if base is None else base
    out = []
    for stream in streams:
        for factor in factors:
            for seed in seeds:
                point = power_point(base, stream, factor, seed)
                out.append(point)
                if progress is not None:
                    progress(point)
    return out


def plot_power(path, points: list[PowerPoint], title: str):
    """Bound / claim against f, one line per stream (mean over seeds, each seed a dot); 1 = caught."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    for stream in dict.fromkeys(p.stream for p in points):
        mine = [p for p in points if p.stream == stream]
        factors = sorted({p.factor for p in mine})
        ratio = {f: [p.epsilon_lower_bound / p.claimed_epsilon for p in mine if p.factor == f] for f in factors}
        line = ax.plot(factors, [float(np.mean(ratio[f])) for f in factors], marker="o", label=stream)[0]
        for f in factors:
            ax.scatter([f] * len(ratio[f]), ratio[f], s=10, color=line.get_color(), alpha=0.5)
    ax.axhline(1.0, color="k", lw=0.8, ls="--", label="claim")
    ax.set_xlabel("noise divided by f (claim unchanged)")
    ax.set_ylabel("lower bound / claimed epsilon")
    ax.set_title(title, fontsize=9)
    ax.legend(frameon=False)
    from raptor.audit.report import save_figure

    return save_figure(fig, path)
