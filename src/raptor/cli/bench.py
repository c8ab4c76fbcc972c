"""Benchmark the per-record engine against the plain step (time and peak-memory ratios, JSON).

A thin front end to ``benchmarks/engine_speed.py`` of a raptor source checkout: by default a
quick run (tiny models, every family, in this process) that prints a table; ``--full`` runs the
medium configuration (d=256, 4 layers, 16 experts, T=128, B=16) with the E and T sweeps and the
Opacus reference, each configuration in a fresh subprocess (about ten minutes on two cores).
``--json PATH`` writes the JSON report (``-`` prints it instead of the table).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from raptor.data.model_source import FAMILY_NAMES
from raptor.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--full", action="store_true",
                        help="medium config + E/T sweeps + profiles (default: quick tiny models)")
    parser.add_argument("--families", nargs="+", choices=FAMILY_NAMES, default=list(FAMILY_NAMES), metavar="FAMILY",
                        help=f"families to run (default: all: {', '.join(FAMILY_NAMES)})")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads in every run (default 1)")
    parser.add_argument("--reps", type=int, default=None, help="timed rounds per configuration (default 2; full 4)")
    parser.add_argument("--no-opacus", action="store_true", help="skip the Opacus dense reference")
    parser.add_argument("--subprocess", action="store_true",
                        help="run each configuration in a fresh interpreter (always on with --full)")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the JSON report here ('-': stdout)")


def _benchmark_module(path: Path | None = None):
    """Load ``benchmarks/engine_speed.py`` from the source checkout this package lives in."""
    path = path or Path(__file__).resolve().parents[3] / "benchmarks" / "engine_speed.py"
    if not path.is_file():
        raise ConfigError(
            f"raptor bench needs a raptor source checkout: {path} was not found; clone the repository and "
            "install it with `pip install -e .`, or run benchmarks/engine_speed.py directly"
        )
    name = "raptor_benchmarks_engine_speed"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run(args: argparse.Namespace) -> int:
    if args.threads < 1:
        raise ConfigError(f"--threads must be >= 1, got {args.threads}")
    if args.json and args.json != "-":
        from raptor.cli.flag_checks import check_output_file

        check_output_file(args.json, "--json")  # before the benchmark runs
    if args.reps is not None and args.reps < 1:
        raise ConfigError(f"--reps must be >= 1, got {args.reps}")
    bench = _benchmark_module()
    quick = not args.full
    configs = bench.plan(
        quick=quick, families=args.families,
        sweep_families=[] if quick else [f for f in ("switch_transformers", "olmoe") if f in args.families],
        experts=[4, 8, 16, 32], seq_lens=[32, 64, 128], warmup=1, reps=args.reps or (2 if quick else 4),
        sweep_reps=4, threads=args.threads, profile=[] if quick else args.families, opacus=not args.no_opacus,
    )
    to_stdout = args.json == "-"
    log = (lambda s: print(s, file=sys.stderr, flush=True)) if to_stdout else (lambda s: print(s, flush=True))
    report = bench.run_benchmark(configs, in_process=quick and not args.subprocess, log=log)
    if to_stdout:
        print(json.dumps(report, indent=1))
    else:
        print()
        print(f"threads={report['threads']}  ratios = median(private) / median(plain), measured in one process")
        print(bench.report_table(report["results"]))
        if args.json:
            out = Path(args.json)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(report, indent=1) + "\n")
            print(f"wrote {out}")
    return 0 if all("error" not in r for r in report["results"]) else 1
