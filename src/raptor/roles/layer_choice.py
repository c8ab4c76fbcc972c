"""Which MoE layer(s) to protect with expert streams: the rule, at no privacy cost.

Rule (METHOD.md, "Choosing the layer to protect"): protect the ``count`` layer(s) whose PUBLIC
owner shares have the highest routing entropy H. Reasoning: with denominator n_hat_e = B pi_hat_e
the bias factor pi_e / pi_hat_e grows with the gap between public and private shares, which is
largest where routing is imbalanced (small shares are estimated with large relative error), and
the noise variance sigma^2 C^2 d_e / n_hat_e^2 explodes for low-load experts. Balanced routing
(high H, small chi^2) keeps both small.

Ties: entropies within ``tie_tol`` nats of each other count as equal, and the LATER layer wins
(closest to the head, matching the reference's "last sparse layer" default).

Privacy: takes only public inputs (owner assignments of the public corpus or their statistics);
uses no privacy budget and must never be given private records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from raptor.errors import ConfigError
from raptor.roles.public_stats import LayerStats, routing_table


@dataclass(frozen=True)
class LayerChoice:
    """The per-layer table and the chosen layer(s) (sorted ascending)."""

    table: tuple[LayerStats, ...]
    chosen: tuple[int, ...]
    rule: str = "highest public routing entropy; ties (within tie_tol) -> later layer"

    def to_dict(self) -> dict:
        return {"rule": self.rule, "chosen": list(self.chosen), "layers": [s.to_dict() for s in self.table]}

    def format_table(self) -> str:
        """A plain-text table, one row per layer; chosen layers are starred."""
        head = f"{'layer':>5} {'E':>3} {'H':>7} {'H/logE':>7} {'chi2':>8} {'bias(split)':>11} " \
               f"{'min pi':>7} {'max pi':>7} {'mean var':>10}"
        rows = [head]
        for s in self.table:
            var = "-" if s.mean_noise_variance is None else f"{s.mean_noise_variance:10.3e}"
            mark = "*" if s.layer in self.chosen else " "
            rows.append(
                f"{s.layer:>4}{mark} {s.num_experts:>3} {s.entropy:7.4f} {s.normalized_entropy:7.4f} "
                f"{s.chi2_uniform:8.4f} {s.split_half_bias:11.4f} {s.min_share:7.4f} {s.max_share:7.4f} {var:>10}"
            )
        rows.append(f"recommended layer(s): {', '.join(str(c) for c in self.chosen)}  ({self.rule})")
        return "\n".join(rows)


def choose_layers(table: Sequence[LayerStats], count: int = 1, tie_tol: float = 1e-9) -> tuple[int, ...]:
    """The ``count`` layers of ``table`` with the highest entropy (ties -> later layer), ascending.

    Privacy: public statistics only.
    """
    if not table:
        raise ConfigError("choose_layers: no MoE layers given")
    if not 1 <= count <= len(table):
        raise ConfigError(f"count must be in [1, {len(table)}] (the number of MoE layers), got {count}")
    if tie_tol < 0:
        raise ConfigError(f"tie_tol must be >= 0, got {tie_tol}")
    # Greedy: take the highest entropy; among layers within tie_tol of it, the latest; repeat.
    remaining = list(table)
    chosen: list[int] = []
    for _ in range(count):
        top = max(s.entropy for s in remaining)
        pick = max((s for s in remaining if s.entropy >= top - tie_tol), key=lambda s: s.layer)
        chosen.append(pick.layer)
        remaining.remove(pick)
    return tuple(sorted(chosen))


def choose_from_owners(
    public_owners: Mapping[int, torch.Tensor],
    num_experts: Mapping[int, int] | int,
    count: int = 1,
    tie_tol: float = 1e-9,
    **stats_kwargs,
) -> LayerChoice:
    """The full rule from public owner assignments {layer: owner_N} (e.g. concatenated
    ``engine.route`` outputs on the public corpus): table + chosen layer(s).

    Privacy: public corpus only; uses no privacy budget.
    """
    table = tuple(routing_table(public_owners, num_experts, **stats_kwargs))
    return LayerChoice(table=table, chosen=choose_layers(table, count, tie_tol))
