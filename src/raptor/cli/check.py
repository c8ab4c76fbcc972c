"""Check the per-record engine against the one-record-at-a-time reference on a tiny model.

``raptor check FAMILY [--json]`` builds the family's tiny model (float64 by default), runs the engine and the
slow reference on a synthetic batch (an empty record included, clipping active on some records),
and prints the maximum relative errors of per-record norms, clipped sums and losses for roles and
dense grouping, with and without LoRA. Exit status 0 when every comparison is within the
tolerance, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json

from raptor.data.model_source import FAMILY_NAMES
from raptor.training.names import CHECK_DTYPES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("family", choices=FAMILY_NAMES, help="model family to check")
    parser.add_argument("--device", default="cpu", help="torch device of the model and batch (e.g. cuda)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--grouping", choices=("roles", "dense", "both"), default="both")
    parser.add_argument("--no-lora", action="store_true", help="skip the LoRA comparisons")
    parser.add_argument("--batch-size", type=int, default=5)
    parser.add_argument("--seq-len", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic model and batch")
    parser.add_argument("--tolerance", type=float, default=None,
                        help="max relative error (default 1e-4; 3e-2 with --dtype bfloat16)")
    parser.add_argument("--dtype", choices=CHECK_DTYPES, default="float64",
                        help="precision of the tiny model (default float64: exact comparison; bfloat16: the "
                             "bf16 engine against a float64 copy of the same weights)")


def run(args: argparse.Namespace) -> int:
    from raptor.audit.engine_check import check_all
    from raptor.errors import ConfigError

    if args.batch_size < 1:
        raise ConfigError(f"--batch-size must be an integer >= 1, got {args.batch_size}")
    if args.seq_len < 2:
        raise ConfigError(f"--seq-len must be an integer >= 2 (records hold tokens to compare), got {args.seq_len}")
    from raptor.cli.flag_checks import MAX_TINY_LENGTH, check_at_most, check_seed
    from raptor.training.run.preflight import check_device

    check_seed(args.seed)  # bounds, the tolerance and the device before the model is built
    check_at_most("--batch-size", args.batch_size, 1024, " (the reference loop runs one record at a time)")
    check_at_most("--seq-len", args.seq_len, MAX_TINY_LENGTH)
    if args.tolerance is not None and not (args.tolerance > 0 and args.tolerance < float("inf")):
        raise ConfigError(f"--tolerance must be a positive finite relative error (e.g. 1e-4), got {args.tolerance}")
    check_device(args.device)
    groupings = ("roles", "dense") if args.grouping == "both" else (args.grouping,)
    loras = (False,) if args.no_lora else (False, True)
    report = check_all(args.family, groupings=groupings, loras=loras, tolerance=args.tolerance, dtype=args.dtype,
                       batch_size=args.batch_size, seq_len=args.seq_len, seed=args.seed, device=args.device)
    passed = report["passed"]
    if args.json:
        print(json.dumps({k: report[k] for k in ("family", "passed", "checks")}, indent=2))
    else:
        print(f"raptor check {args.family} (tolerance {report['tolerance']:g}, {args.dtype} tiny model on {args.device})")
        print(f"{'grouping':<8} {'lora':<5} {'norms':>9} {'sums':>9} {'loss':>9} {'owners':>6} {'clipped':>8}  result")
        for r in report["checks"]:
            print(f"{r['grouping']:<8} {str(r['lora']):<5} {r['max_rel_norm_error']:9.2e} {r['max_rel_sum_error']:9.2e} "
                  f"{r['max_rel_loss_error']:9.2e} {str(r['owners_match']):>6} {r['clipped_groups']:>3}/"
                  f"{r['num_groups']:<4}  {'pass' if r['passed'] else 'FAIL'}")
        print("PASS" if passed else "FAIL")
    return 0 if passed else 1
