"""Print the epsilon spent by T Poisson-subsampled Gaussian releases (q, sigma) at a given delta.

The release is the RAPTOR step as one mechanism: pass sigma_eff = (1/sigma_s^2 + L/sigma_e^2)^(-1/2)
for a joint step (see ``raptor plan``). Accountant: PLD (primary, value discretisation 2e-4) or RDP.
"""

from __future__ import annotations

import argparse
import json

from raptor.accounting.events import ACCOUNTANTS, ADJACENCIES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sample-rate", type=float, required=True, metavar="Q",
                        help="Poisson sampling rate q = B/N, in (0, 1]")
    parser.add_argument("--noise-multiplier", type=float, required=True, metavar="S",
                        help="noise multiplier sigma of each release (noise std / clip norm), > 0")
    parser.add_argument("--steps", type=int, required=True, metavar="T", help="number of releases, >= 1")
    parser.add_argument("--delta", type=float, required=True, metavar="D", help="target delta, in (0, 1)")
    parser.add_argument("--accountant", choices=ACCOUNTANTS, default="pld",
                        help="pld (primary, default) or rdp (cross-check)")
    parser.add_argument("--adjacency", choices=ADJACENCIES, default="add-remove",
                        help="neighbouring datasets: add/remove one record (default) or replace one")
    parser.add_argument("--json", action="store_true", help="print one JSON object (key 'epsilon')")


#: the smallest noise multiplier the PLD accountant is asked about: its table grows as 1/sigma (about
#: 8 s at 0.1, terabytes at 1e-4); RDP costs the same at any sigma
MIN_PLD_NOISE: float = 0.1


def run(args: argparse.Namespace) -> int:
    from raptor.accounting import VALUE_DISCRETIZATION_INTERVAL, EventRun, canonical_counts, epsilon_of
    from raptor.accounting.events import check_steps
    from raptor.errors import ConfigError

    check_steps(args.steps, f"--steps {args.steps}")
    if args.accountant == "pld" and 0 < args.noise_multiplier < MIN_PLD_NOISE:
        raise ConfigError(f"--noise-multiplier {args.noise_multiplier:g} is below {MIN_PLD_NOISE:g}: the PLD "
                          "accountant's table grows as 1/sigma and would not fit in memory; use --accountant rdp "
                          "for such small noise (the epsilon is huge either way)")
    run_ = EventRun(args.sample_rate, args.noise_multiplier, args.steps)  # validates q, sigma, T
    eps = epsilon_of(canonical_counts([run_]), args.delta, accountant=args.accountant, adjacency=args.adjacency)
    result = {
        "epsilon": eps,
        "delta": args.delta,
        "sample_rate": run_.sample_rate,
        "noise_multiplier": run_.noise_multiplier,
        "steps": run_.count,
        "accountant": args.accountant,
        "adjacency": args.adjacency,
        "value_discretization_interval": VALUE_DISCRETIZATION_INTERVAL if args.accountant == "pld" else None,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"epsilon = {eps:.4f} at delta = {args.delta:g}  (q = {run_.sample_rate:g}, "
              f"sigma = {run_.noise_multiplier:g}, T = {run_.count}, {args.accountant}, {args.adjacency})")
    return 0
