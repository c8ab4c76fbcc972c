"""Calibrate the shared and expert noise multipliers of a run to a total (epsilon, delta) budget.

Prints sigma_s, sigma_e, sigma_eff, q, T, the epsilon reached (<= target) and delta (default: the
largest power of ten <= 1/(N ln N)). The split ratio r is a share of inverse noise variance:
1/sigma_s^2 = r/sigma_eff^2, L/sigma_e^2 = (1 - r)/sigma_eff^2.
"""

from __future__ import annotations

import argparse
import json

from raptor.accounting.events import ACCOUNTANTS, ADJACENCIES


def _alternate(text: str) -> tuple[int, int]:
    parts = text.split(":")
    try:
        s, x = (int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid schedule {text!r}: use S:X with integers S, X >= 1 (shared-only then expert-only steps), "
            "e.g. 1:1") from None
    if s < 1 or x < 1:
        raise argparse.ArgumentTypeError(f"invalid schedule {text!r}: S and X must both be >= 1")
    return (s, x)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset-size", type=int, required=True, metavar="N", help="private training records")
    parser.add_argument("--batch-size", type=int, required=True, metavar="B",
                        help="expected (Poisson) batch size; q = B/N")
    length = parser.add_mutually_exclusive_group(required=True)
    length.add_argument("--epochs", type=float, default=None, metavar="E", help="epochs; T = ceil(N/B) * E")
    length.add_argument("--steps", type=int, default=None, metavar="T", help="planned updates (instead of --epochs)")
    parser.add_argument("--epsilon", type=float, required=True, metavar="EPS", help="total epsilon budget, > 0")
    parser.add_argument("--delta", type=float, default=None, metavar="D",
                        help="delta in (0, 1/N); default: largest power of ten <= 1/(N ln N)")
    parser.add_argument("--layers", type=int, default=1, metavar="L", help="trained MoE layers (default 1)")
    parser.add_argument("--shared-ratio", type=float, default=0.9, metavar="R",
                        help="share r in (0, 1) of inverse noise variance for the shared stream "
                             "(default 0.9, as raptor train)")
    parser.add_argument("--alternate", type=_alternate, default=None, metavar="S:X",
                        help="alternate S shared-only and X expert-only steps (default: joint steps)")
    parser.add_argument("--adjacency", choices=ADJACENCIES, default="add-remove",
                        help="neighbouring datasets (default add-remove)")
    parser.add_argument("--accountant", choices=ACCOUNTANTS, default="pld",
                        help="primary accountant for the calibration (default pld)")
    parser.add_argument("--json", action="store_true", help="print the plan as one JSON object")


def run(args: argparse.Namespace) -> int:
    from raptor.accounting import plan_budget

    plan = plan_budget(dataset_size=args.dataset_size, batch_size=args.batch_size, epochs=args.epochs,
                       steps=args.steps, epsilon=args.epsilon, delta=args.delta, num_layers=args.layers,
                       shared_ratio=args.shared_ratio, alternate=args.alternate, adjacency=args.adjacency,
                       accountant=args.accountant)
    if args.json:
        print(json.dumps(plan.to_dict()))
        return 0
    schedule = "joint" if plan.alternate is None else f"alternate {plan.alternate[0]}:{plan.alternate[1]}"
    delta_note = " (default: largest power of ten <= 1/(N ln N))" if plan.delta_is_default else ""
    print(f"sigma_s   = {plan.sigma_shared:.6g}")
    print(f"sigma_e   = {plan.sigma_expert:.6g}")
    print(f"sigma_eff = {plan.sigma_eff:.6g}  (L = {plan.num_layers}, r = {plan.shared_ratio:g}, {schedule})")
    if plan.alternate is not None:
        print(f"            alternating steps release one stream: shared-only steps sigma_s = "
              f"{plan.noise_multiplier_for_step(0):.6g}, expert-only steps sigma_e/sqrt(L) = "
              f"{plan.noise_multiplier_for_step(plan.alternate[0]):.6g}")
    print(f"q         = {plan.sample_rate:.6g}  (B = {plan.batch_size}, N = {plan.dataset_size})")
    print(f"T         = {plan.steps}")
    print(f"epsilon   = {plan.epsilon:.4f}  (target {plan.target_epsilon:g}, {plan.accountant}, {plan.adjacency})")
    print(f"delta     = {plan.delta:g}{delta_note}")
    return 0
