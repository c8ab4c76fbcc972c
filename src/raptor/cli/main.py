"""The ``raptor`` console script: a thin dispatcher over subcommand modules.

Each subcommand lives in its own module under ``raptor.cli`` and exposes two functions:
``add_arguments(parser)`` and ``run(args) -> int``. Adding a subcommand is one line in
:data:`COMMANDS`. Bad arguments exit with status 2 and a message that says what to do.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from raptor import __version__
from raptor.errors import RaptorError, RaptorWarning

#: subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "account": ("raptor.cli.account", "epsilon of T subsampled Gaussian releases at a delta"),
    "plan": ("raptor.cli.plan", "calibrate sigma_s and sigma_e to an (epsilon, delta) budget"),
    "check": ("raptor.cli.check", "compare the per-record engine with the one-record reference on a tiny model"),
    "demo": ("raptor.cli.demo", "fine-tune a real pretrained MoE (minilm-moe) on the bundled SST-2 sample, RAPTOR vs DP-SGD (the main job)"),
    "train": ("raptor.cli.train", "DP fine-tuning with RAPTOR or a baseline; writes results.json and a checkpoint"),
    "predict": ("raptor.cli.predict", "predict labels with a model a raptor train run saved (CSV/JSONL out)"),
    "inspect": ("raptor.cli.inspect", "public routing entropy, shares, bias and variance per MoE layer; recommended layer(s)"),
    "audit": ("raptor.cli.audit", "empirical privacy audit: an epsilon lower bound next to the claim"),
    "upcycle": ("raptor.cli.upcycle", "upcycle a dense BERT checkpoint (e.g. the installed all-MiniLM-L6-v2) into a "
                                      "raptor bert_moe MoE checkpoint"),
    "pretrain": ("raptor.cli.pretrain", "pre-train a small MoE on public text (a warm start for DP fine-tuning)"),
    "bench": ("raptor.cli.bench", "time and peak-memory ratios of the per-record engine vs the plain step"),
}


def _chosen(argv: list[str]) -> str | None:
    """The subcommand named in ``argv`` (the first word that is one), or None."""
    return next((a for a in argv if a in COMMANDS), None)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser. Only the module of the chosen subcommand is imported (all of them when
    ``argv`` is None), so ``raptor --help`` and argument errors never import torch."""
    parser = argparse.ArgumentParser(
        prog="raptor",
        description="Role-aware differentially private fine-tuning of Mixture-of-Experts transformers.",
    )
    parser.add_argument("--version", action="version", version=f"raptor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = None if argv is None else _chosen(argv)
    for name, (module_name, help_text) in COMMANDS.items():
        if argv is not None and name != chosen:
            sub.add_parser(name, help=help_text, description=help_text)
            continue
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip().splitlines()[0])
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return 2
    with warnings.catch_warnings():
        show = warnings.showwarning

        def one_line(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, RaptorWarning):
                if args.command == "train":
                    from raptor.cli.flags import restate

                    message = restate(str(message))
                print(f"raptor {args.command}: warning: {message}", file=sys.stderr)
            else:
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = one_line
        from raptor.cli.flag_checks import Terminated, interrupted_message, on_sigterm, write_error_message

        old_term = _install_sigterm(on_sigterm)
        try:
            return int(args._run(args) or 0)
        except RaptorError as err:
            if args.command == "train":  # the library names fields; say them as the flags that set them
                from raptor.cli.flags import restate

                err = restate(str(err))
            print(f"raptor {args.command}: error: {err}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(interrupted_message(args, "interrupted"), file=sys.stderr)
            return 130
        except Terminated:
            print(interrupted_message(args, "terminated (SIGTERM)"), file=sys.stderr)
            return 143
        except Exception as err:  # a write that cannot succeed (full disk, read-only): one line, not a traceback
            message = write_error_message(err, args)
            if message is None:
                raise
            print(f"raptor {args.command}: error: {message}", file=sys.stderr)
            return 2
        finally:
            _install_sigterm(old_term)
            from raptor.cli.run_lock import release_all

            release_all()  # the --output-dir locks this command took


def _install_sigterm(handler):
    """Set the SIGTERM handler (main thread only; returns the previous one, or None elsewhere)."""
    import signal
    import threading

    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, handler)


if __name__ == "__main__":
    sys.exit(main())
