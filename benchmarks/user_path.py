"""The path a user runs, end to end: ``raptor train`` on a small CSV, private against nonprivate.

Each run is the CLI itself (``raptor.cli.main.main(["train", ...])``) in a fresh interpreter, on a
CSV of short SST-2 sentences (the sample bundled with raptor; the issue's "300 short records"),
with ``--model minilm-moe`` (the upcycled all-MiniLM-L6-v2, built into ``$RAPTOR_CACHE`` on first
use; build it once before timing), in two settings:

* ``lora``: ``--lora`` (r 8 on attention and on the trained layer's experts, head trained);
* ``full``: every weight of the method's trainable set (no LoRA).

and two methods, ``raptor`` (the private run) and ``nonprivate``. Every run uses the same seed,
data and flags but ``--method``. Phases are timed by wrapping the functions the CLI calls
(benchmark-only instrumentation, in the worker): ``model_load``
(:func:`raptor.data.model_source.load_model_and_tokenizer`), ``public_stage`` (public routing, read
from its cache after the untimed warm-up run, and
:func:`raptor.training.setup.public_stage.public_stage`), ``noise_plan``, ``updates`` (every
:meth:`Trainer.step`), ``evaluation``, ``checkpoint`` (every :meth:`Trainer.save`), ``final_save``
(:func:`raptor.training.saving.final_model.save_final_model`), ``imports`` (``import
raptor.cli.main`` and what the first call imports is counted in ``other``) and ``other`` (the rest:
reading and tokenizing the CSV, checks, results). ``total`` is the wall time of the whole process
body (import included).

After the CLI run the same worker times the **library path** at the same settings: a fresh model,
the CLI run's own config, tokenized private and public records, :func:`assemble_run` and
``trainer.step()`` called directly (what ``benchmarks/minilm_step.py`` does), so the CLI's
per-update time can be compared with the library's in one process.

Ratios (each measured in this one run):

* ``end_to_end``: total of ``raptor`` / total of ``nonprivate``, per setting (target <= 1.3);
* ``full_over_lora_per_record``: the median private update of ``full`` over that of ``lora``, each
  divided by the expected batch size (target <= 2.5);
* ``cli_over_library``: the CLI's median private update over the library's, per setting (target <=
  1.2).

Wall time is the headline; process CPU time is given beside it (on a machine shared with other
jobs it does not count waiting for a core). The load average at the start and end is recorded.

    .venv/bin/python benchmarks/user_path.py            # 300 records, the CLI's default steps, writes results/user_path.json
    .venv/bin/python benchmarks/user_path.py --quick    # the shipped tiny model, 40 records, 2 steps (a smoke run)
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

import _common  # noqa: E402

DEFAULT_OUT = _HERE / "results" / "user_path.json"
SETTINGS = {"lora": ["--lora"], "full": ["--no-lora"]}
METHODS = ("raptor", "nonprivate")
PHASES = ("imports", "model_load", "public_stage", "noise_plan", "updates", "evaluation", "checkpoint",
          "final_save", "other")
TARGETS = {"end_to_end": 1.3, "full_over_lora_per_record": 2.5, "cli_over_library": 1.2}


def write_csv(path: Path, records: int, max_words: int) -> int:
    """The first ``records`` sentences of the bundled SST-2 sample with at most ``max_words`` words."""
    from raptor.data.sample import bundled_dir

    rows = []
    with gzip.open(bundled_dir() / "SST-2" / "train.tsv.gz", "rt", encoding="utf-8") as fh:
        reader = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(reader)
        for sentence, label in reader:
            if len(sentence.split()) <= max_words:
                rows.append((sentence, label))
            if len(rows) == records:
                break
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["text", "label"])
        w.writerows(rows)
    return len(rows)


# ---------------------------------------------------------------------------------------- worker
def _instrument(clock: _common.Clock, seen: dict) -> None:
    """Wrap the functions the CLI calls (this process only)."""
    import raptor.data.model_source as model_source
    import raptor.training.run.assemble as assemble
    import raptor.training.saving.final_model as final_model
    from raptor.training.step.trainer import Trainer

    model_source.load_model_and_tokenizer = clock.wrap("model_load", model_source.load_model_and_tokenizer)
    real_routing = assemble.cached_public_routing

    def routing(model, public, config, compute, root):  # the public routing, computed or read from its cache
        seen["public"] = public
        return real_routing(model, public, config, compute, root)

    assemble.cached_public_routing = clock.wrap("public_stage", routing)
    assemble.public_stage = clock.wrap("public_stage", assemble.public_stage)
    assemble.make_noise_plan = clock.wrap("noise_plan", assemble.make_noise_plan)
    final_model.save_final_model = clock.wrap("final_save", final_model.save_final_model)
    Trainer.save = clock.wrap("checkpoint", Trainer.save)
    Trainer.evaluate = clock.wrap("evaluation", Trainer.evaluate)
    real_step = Trainer.step

    def step(self):
        seen["trainer"] = self
        t0, c0 = time.perf_counter(), time.process_time()
        real_step(self)
        seen.setdefault("steps", []).append((time.perf_counter() - t0, time.process_time() - c0))

    Trainer.step = step


def _library_steps(seen: dict, model_name: str, updates: int, warmup: int) -> dict:
    """``trainer.step()`` on the library path with the CLI run's config and records."""
    import dataclasses

    import torch

    from raptor.moe.models import load_model
    from raptor.shipped import resolve
    from raptor.training.run.assemble import assemble_run
    from raptor.training.step.trainer import Trainer

    cli = seen["trainer"]
    config = dataclasses.replace(cli.config, steps=10_000, eval_every=0,
                                 output_dir=tempfile.mkdtemp(prefix="raptor_user_path_lib_"))
    net = load_model(resolve(model_name), num_labels=int(cli.model.config.num_labels),
                     generator=torch.Generator().manual_seed(0))
    step = Trainer.step  # the instrumented one: its times are collected, then split off
    trainer = assemble_run(config, net, train=cli.train, validation=None, public=seen["public"])
    before = len(seen["steps"])
    for _ in range(warmup + updates):
        step(trainer)
    times = seen["steps"][before + warmup:]
    del seen["steps"][before:]
    return {"wall": [t for t, _ in times], "cpu": [c for _, c in times]}


def worker(spec: dict) -> dict:
    t_start, c_start = time.perf_counter(), time.process_time()
    import torch

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    import raptor.cli.main as cli_main

    imports = time.perf_counter() - t_start
    clock = _common.Clock()
    seen: dict = {}
    _instrument(clock, seen)
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    rc = cli_main.main(spec["argv"])
    total = time.perf_counter() - t_start
    cpu_total = time.process_time() - c_start
    if rc != 0:
        return {"error": f"raptor train exited with {rc}"}
    phases = clock.take()
    phases["imports"] = imports
    phases["updates"] = sum(t for t, _ in seen.get("steps", []))
    phases["other"] = total - sum(v for k, v in phases.items())
    steps = seen.get("steps", [])
    trainer = seen["trainer"]
    result = {
        "total_s": total, "cpu_total_s": cpu_total, "cli_main_s": time.perf_counter() - t0,
        "phases_s": {k: phases.get(k, 0.0) for k in PHASES},
        "update_s": _common.summary([t for t, _ in steps]), "update_cpu_s": _common.summary([c for _, c in steps]),
        "updates": len(steps), "batch_size": int(trainer.config.batch_size),
        "checkpoints": None, "trainable_params": sum(p.numel() for p in trainer.params.values()),
        "torch_threads": torch.get_num_threads(), "load_avg_at_start": load0,
    }
    if spec.get("library_updates"):
        lib = _library_steps(seen, spec["model"], spec["library_updates"], spec.get("library_warmup", 1))
        result["library_update_s"] = _common.summary(lib["wall"])
        result["library_update_cpu_s"] = _common.summary(lib["cpu"])
    result["load_avg_at_end"] = os.getloadavg()
    return result


# ---------------------------------------------------------------------------------------- driver
def _argv(args, csv_path: Path, setting: str, method: str, out_dir: Path) -> list[str]:
    argv = ["train", "--train-file", str(csv_path), "--text-column", "text", "--model", args.model,
            "--method", method, "--seed", "0", "--no-progress", "--overwrite", "--output-dir", str(out_dir),
            "--max-length", str(args.max_length)]
    if args.steps is not None:
        argv += ["--steps", str(args.steps)]
    return argv + SETTINGS[setting] + list(args.extra)


def run(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="raptor_user_path_"))
    csv_path = work / "train.csv"
    # every timed run finds the model built and its public routing cached, as a user's second run does
    # (the first run's cost is README's first-run figure)
    n = write_csv(csv_path, args.records, args.max_words)
    warm = _argv(args, csv_path, args.settings[0], "nonprivate", work / "warm-up") + ["--steps", "1"]
    _common.run_worker(Path(__file__), {"argv": warm, "model": args.model, "threads": args.threads,
                                        "library_updates": 0, "library_warmup": 0}, timeout=args.timeout)
    runs: dict[str, dict[str, dict]] = {}
    load_at_start = os.getloadavg()
    for setting in args.settings:
        runs[setting] = {}
        for method in args.methods:
            spec = {"argv": _argv(args, csv_path, setting, method, work / f"{setting}-{method}"), "model": args.model,
                    "threads": args.threads, "library_updates": args.library_updates if method == "raptor" else 0,
                    "library_warmup": args.library_warmup}
            r = _common.run_worker(Path(__file__), spec, timeout=args.timeout)
            r["argv"] = ["raptor"] + spec["argv"]
            runs[setting][method] = r
            shown = r.get("error") or f"{r['total_s']:.1f} s, update {r['update_s']['median']:.2f} s"
            print(f"{setting:>5} {method:>10}: {shown}", flush=True)
    return {"benchmark": "user_path", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "records": n, "runs": runs, "ratios": ratios(runs), "targets": TARGETS,
            "environment": {"python": platform.python_version(), "machine": platform.machine(),
                            "cpu_count": os.cpu_count(), "load_avg_at_start": load_at_start,
                            "load_avg_at_end": os.getloadavg(), "torch": _torch_version()}}


def _torch_version() -> str:
    import torch

    return torch.__version__


def _ok(r: dict | None) -> bool:
    return r is not None and "error" not in r


def ratios(runs: dict) -> dict:
    """The issue's three ratios (None where a run is missing), each with its target and verdict."""
    out: dict[str, dict] = {}

    def put(name: str, key: str, value: float | None, cpu: float | None) -> None:
        out.setdefault(name, {})[key] = {"wall": value, "cpu": cpu, "target": TARGETS[name],
                                         "meets": None if value is None else value <= TARGETS[name]}

    for setting, by in runs.items():
        p, q = by.get("raptor"), by.get("nonprivate")
        if _ok(p) and _ok(q):
            put("end_to_end", setting, p["total_s"] / q["total_s"], p["cpu_total_s"] / q["cpu_total_s"])
        if _ok(p) and "library_update_s" in p:
            put("cli_over_library", setting, p["update_s"]["median"] / p["library_update_s"]["median"],
                p["update_cpu_s"]["median"] / p["library_update_cpu_s"]["median"])
    full, lora = runs.get("full", {}).get("raptor"), runs.get("lora", {}).get("raptor")
    if _ok(full) and _ok(lora):
        def per(r, key):
            return r[key]["median"] / r["batch_size"]

        put("full_over_lora_per_record", "raptor", per(full, "update_s") / per(lora, "update_s"),
            per(full, "update_cpu_s") / per(lora, "update_cpu_s"))
    return out


def table(report: dict) -> str:
    rows = []
    for setting, by in report["runs"].items():
        for method, r in by.items():
            if not _ok(r):
                rows.append({"run": f"{setting} {method}", "total": None})
                continue
            row = {"run": f"{setting} {method}", "total": r["total_s"], "cpu": r["cpu_total_s"],
                   "n": r["updates"], "update": r["update_s"]["median"],
                   "lib": r.get("library_update_s", {}).get("median")}
            row.update({k: v for k, v in r["phases_s"].items()})
            rows.append(row)
    cols = [("run", "run"), ("total", "total s"), ("cpu", "cpu s"), ("n", "updates"), ("update", "update s"),
            ("lib", "library update s")] + [(k, f"{k} s") for k in PHASES]
    lines = [_common.format_table(rows, cols), ""]
    for name, by in report["ratios"].items():
        for key, v in by.items():
            verdict = "meets" if v["meets"] else "MISSES"
            lines.append(f"{name} ({key}): {v['wall']:.3g} wall, {v['cpu']:.3g} cpu; target <= {v['target']} "
                         f"({verdict})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="the shipped switch-public-tiny model, 40 records, 2 steps")
    p.add_argument("--model", default=None, help="default minilm-moe (quick: switch-public-tiny)")
    p.add_argument("--records", type=int, default=None, help="CSV records (default 300; quick 40)")
    p.add_argument("--max-words", type=int, default=12, help="short sentences: at most this many words")
    p.add_argument("--max-length", type=int, default=128, help="--max-length of the runs (default 128)")
    p.add_argument("--steps", type=int, default=None, help="--steps of the runs (default: the CLI's; quick 2)")
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--library-updates", type=int, default=None, help="timed library updates (default 3; quick 1)")
    p.add_argument("--library-warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=None, help="torch threads in every run (default: torch's own, "
                   "as the CLI runs)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds a run may take")
    p.add_argument("--out", type=Path, default=None, help=f"JSON path (default {DEFAULT_OUT}; quick: none)")
    p.add_argument("extra", nargs="*", help="more raptor train flags for every run (after --)")
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    q = args.quick
    args.model = args.model or ("switch-public-tiny" if q else "minilm-moe")
    args.records = args.records or (40 if q else 300)
    if q and args.steps is None:
        args.steps = 2
    if args.library_updates is None:
        args.library_updates = 1 if q else 3
    report = run(args)
    print(table(report))
    _common.write_report(report, args.out if args.out is not None else (None if q else DEFAULT_OUT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
