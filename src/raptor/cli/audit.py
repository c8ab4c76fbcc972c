"""Empirical privacy audit: an epsilon lower bound next to the claimed epsilon, with its confidence.

``raptor audit mechanism`` audits one update's real release path (white-box, many releases; a
``--variant`` other than ``correct`` runs a deliberately broken mechanism, whose bound should exceed
its claim). ``raptor audit one-run`` trains once with canaries (Steinke et al. 2023); flags after
``--`` are passed to ``raptor train``; ``--canary-kind dirac`` uses white-box gradient canaries
(:mod:`raptor.audit.dirac`), the audit with power. Both write OUTPUT_DIR/audit.json and OUTPUT_DIR/scores.png.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from raptor.audit.names import GENERATORS, STREAMS, VARIANTS

    sub = parser.add_subparsers(dest="audit", metavar="AUDIT", required=True)
    mech = sub.add_parser("mechanism", help="white-box audit of one update (many releases)")
    mech.add_argument("--variant", choices=VARIANTS, default="correct")
    mech.add_argument("--streams", choices=STREAMS, default="joint", help="released groups the attacker scores")
    mech.add_argument("--sample-rate", type=float, default=0.1, help="the canary's Poisson rate q (default 0.1)")
    mech.add_argument("--sigma", type=float, default=0.5, help="the step's joint sigma_eff (default 0.5)")
    mech.add_argument("--shared-ratio", type=float, default=0.5)
    mech.add_argument("--delta", type=float, default=1e-2, help="delta of the comparison (default 1e-2)")
    mech.add_argument("--releases", type=int, default=20_000, help="releases per world, per half (default 20000)")
    mech.add_argument("--confidence", type=float, default=0.95)
    mech.add_argument("--seed", type=int, default=0, help="the audit's seed (audits are reproducible)")
    mech.add_argument("--output-dir", default="runs/audit-mechanism")
    mech.add_argument("--generator", choices=GENERATORS, default="torch",
                      help="noise stream: seeded torch (default) or the AES-256-CTR stream of secure runs")
    mech.add_argument("--power", action="store_true",
                      help="the power curve instead: each stream's noise / f for f in 1, 1.25, 1.5, 2, seeds "
                           "--seed..--seed+2; prints it and writes OUTPUT_DIR/power.json and power.png")
    one = sub.add_parser("one-run", help="one training run with canaries (Steinke, Nasr & Jagielski 2023)")
    one.add_argument("--method", default="raptor", help="raptor train --method (default raptor)")
    one.add_argument("--canaries", type=int, default=None,
                     help="m canaries, each included with probability 1/2 (default 1000; 50000 with --canary-kind dirac)")
    one.add_argument("--canary-kind", choices=("input", "dirac"), default="input",
                     help="input: random-token records, loss and gradient scores (black-box, weak); dirac: white-box "
                          "gradient canaries on coordinates no real record touches, scored from each step's release "
                          "(Steinke et al. 2023, section 6)")
    one.add_argument("--sample-rate", type=float, default=None,
                     help="dirac only: the run's Poisson rate q over records and canaries (default 0.5; sets the "
                          "batch size, so give no --batch-size after --)")
    one.add_argument("--epsilon", type=float, default=8.0, help="the run's epsilon budget (default 8)")
    one.add_argument("--confidence", type=float, default=0.95)
    one.add_argument("--audit-seed", type=int, default=0, help="seed of the canaries and their coin flips")
    one.add_argument("--output-dir", default="runs/audit-one-run")
    one.add_argument("--no-progress", action="store_true")
    one.add_argument("train_args", nargs=argparse.REMAINDER,
                     help="after --: raptor train flags (default: a quick run on the bundled SST-2 sample)")


def load_run_inputs(cfg):
    """What ``raptor train`` builds from its flags (``cfg.train_args``) before training: config, model,
    tokenized private, public and dev records (:class:`raptor.audit.one_run.RunInputs`). The flags
    are parsed here; the records and the model are loaded as ``raptor train`` loads them
    (:func:`raptor.data.loaders.load_data`, :func:`raptor.data.model_source.load_model_and_tokenizer`)."""
    from raptor.audit.one_run import RunInputs
    from raptor.cli import train as train_cli
    from raptor.data.loaders import load_data, to_records
    from raptor.data.model_source import init_generator, load_model_and_tokenizer
    from raptor.errors import ConfigError
    from raptor.training.config import is_private

    if not is_private(cfg.method):
        raise ConfigError("--method nonprivate has no epsilon to audit; pick a private method")
    parser = argparse.ArgumentParser(prog="raptor audit one-run -- (raptor train flags)")
    train_cli.add_arguments(parser)
    args = parser.parse_args(["--method", cfg.method, "--epsilon", str(cfg.epsilon), "--output-dir", cfg.output_dir,
                              "--no-progress", *cfg.train_args])
    config = train_cli.config_from_args(args)
    data = load_data(train_cli.data_source(args, config))
    model, tokenizer = load_model_and_tokenizer(train_cli.model_source(args), data.public, data.private.num_labels,
                                                init_generator(config.seed))
    return RunInputs(config=config, model=model, vocab_size=len(tokenizer), max_length=args.max_length,
                     num_labels=data.private.num_labels, train=to_records(tokenizer, data.private, args.max_length),
                     public=to_records(tokenizer, data.public, args.max_length),
                     validation=to_records(tokenizer, data.validation, args.max_length)
                     if data.validation is not None else None)


#: what ``raptor audit`` writes in its --output-dir (``run``: one-run's training run)
AUDIT_FILES = ("audit.json", "scores.png", "power.json", "power.png", "run")


def _line(kind: str, bound: float, claim: float, confidence: float, delta: float) -> str:
    verdict = "ABOVE the claim: the mechanism is not what is accounted" if bound > claim else "below the claim"
    return (f"{kind}: epsilon lower bound {bound:.3f} vs claimed epsilon {claim:.3f} at delta {delta:g} "
            f"({confidence:.0%} confidence) -- {verdict}")


def _power(cfg, out: Path) -> int:
    from raptor.audit.power import plot_power, power_curve
    from raptor.audit.report import write_json

    print("stream  factor  seed  bound   claim   caught")
    points = power_curve(cfg, seeds=(cfg.seed, cfg.seed + 1, cfg.seed + 2), progress=lambda p: print(
        f"{p.stream:7s} {p.factor:6.2f} {p.seed:5d} {p.epsilon_lower_bound:6.3f} {p.claimed_epsilon:6.3f}  "
        f"{'yes' if p.caught else 'no'}", flush=True))
    title = f"mechanism audit power: {cfg.releases:,} releases per world, delta {cfg.delta:g}"
    png = plot_power(out / "power.png", points, title)
    print(f"wrote {write_json(out / 'power.json', {'audit': 'mechanism-power', 'points': [p.to_dict() for p in points]})}"
          f" and {png}")
    return 0


def run(args: argparse.Namespace) -> int:
    from raptor.audit.report import plot_scores, write_json
    from raptor.cli.flag_checks import check_audit_args
    from raptor.cli.run_lock import claim_output_dir
    from raptor.cli.run_output import quiet_transformers
    from raptor.errors import ConfigError

    out = Path(args.output_dir)
    quiet_transformers(args)  # --no-progress: no "Loading weights" bar either
    check_audit_args(args)  # bounds of the counts and the noise
    # before the audit runs; locked, and never over another run's files
    claim_output_dir(args.output_dir, command="raptor audit", writes=AUDIT_FILES)
    if not 0.5 < args.confidence < 1.0:
        raise ConfigError(f"--confidence must be in (0.5, 1), got {args.confidence}")
    significance = 1.0 - args.confidence
    if args.audit == "mechanism":
        from raptor.audit.mechanism import MechanismAuditConfig, run_mechanism_audit

        cfg = MechanismAuditConfig(variant=args.variant, streams=args.streams, sample_rate=args.sample_rate,
                                   sigma_eff=args.sigma, shared_ratio=args.shared_ratio, delta=args.delta,
                                   releases=args.releases, significance=significance, seed=args.seed,
                                   generator=args.generator)
        if args.power:
            return _power(cfg, out)
        res = run_mechanism_audit(cfg)
        payload = res.to_dict()
        print(_line(f"mechanism audit ({args.variant}, {args.streams})", res.epsilon_lower_bound,
                    res.claimed_epsilon, args.confidence, args.delta))
        panels = {"log-likelihood ratio": (res.in_scores, res.out_scores)}
        title = f"one update, {args.variant}: bound {res.epsilon_lower_bound:.2f} vs claim {res.claimed_epsilon:.2f}"
    else:
        from raptor.audit.one_run import (
            DIRAC_CANARIES,
            DIRAC_TRAIN_ARGS,
            QUICK_TRAIN_ARGS,
            OneRunConfig,
            run_one_run_audit,
        )

        extra = [a for a in args.train_args if a != "--"]
        dirac = args.canary_kind == "dirac"
        if dirac and any(a == "--batch-size" or a.startswith("--batch-size=") for a in extra):
            raise ConfigError("--canary-kind dirac sets the batch size from --sample-rate (records and canaries "
                              "together); drop --batch-size after -- and give --sample-rate instead")
        canaries = args.canaries if args.canaries is not None else (DIRAC_CANARIES if dirac else 1000)
        cfg = OneRunConfig(method=args.method, canaries=canaries, epsilon=args.epsilon,
                           significance=significance, audit_seed=args.audit_seed,
                           train_args=tuple(extra) if extra else (DIRAC_TRAIN_ARGS if dirac else QUICK_TRAIN_ARGS),
                           output_dir=str(out / "run"), canary_kind=args.canary_kind,
                           sample_rate=(0.5 if args.sample_rate is None else args.sample_rate) if dirac
                           else args.sample_rate)
        res = run_one_run_audit(cfg, load_run_inputs(cfg), progress=not args.no_progress)
        payload = res.to_dict()
        print(f"randomness: {res.randomness}")
        for name, b in res.bounds.items():
            print(_line(f"one-run audit ({args.method}, {name} score, m={canaries})", b.epsilon,
                        res.claimed_epsilon, args.confidence, res.delta))
        panels = dict(res.scores)
        title = (f"one run, {args.method}: claimed eps {res.claimed_epsilon:.2f}; bounds "
                 + ", ".join(f"{k} {b.epsilon:.2f}" for k, b in res.bounds.items()))
    print(f"wrote {write_json(out / 'audit.json', payload)} and {plot_scores(out / 'scores.png', panels, title)}")
    return 0
