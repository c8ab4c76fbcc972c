"""One non-private and one ``raptor`` (epsilon = 8) run per GLUE task, on the tiny random Switch.

For each task in the GLUE directory (``sst2 mrpc rte stsb wnli`` by default) and each method, runs
``raptor train`` as a subprocess (one at a time, ``--threads`` torch threads), then writes one
summary JSON and a markdown table: the task's GLUE metrics on its dev split, epsilon and delta from
the ledger, sigma per stream, updates, seconds and the exact command of each run.

Settings (the same for both methods of a task; nothing is tuned on dev):

* the model: ``raptor train``'s default tiny Switch MoE (random weights, d = 64, 2 layers x 4
  experts, WordPiece trained on the public slice), AdamW at lr 3e-3, C = 1, seed 0 (reproducible,
  not secure);
* the public corpus: GLUE's public convention in raptor, ``--public-size 0.05``: a 5 % slice of
  the task's training split (PCG64 permutation, seed 0), removed from the private set;
  everything else in ``train.tsv`` is private; the dev split is evaluation data;
* per task (``TASKS``): Poisson batch size, epochs, max length; SST-2's private set is capped to
  its first 10,000 records (``--max-train-samples``) to keep the run cheap.

Resumable: a run whose ``results.json`` exists is read, not rerun (``--force`` reruns). Each run's
own files stay under ``--runs-dir``.

    .venv/bin/python experiments/glue_tasks.py --data-dir ../shared/data/glue
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: flags shared by every run (``--epsilon`` is ignored by ``nonprivate``)
COMMON: tuple[str, ...] = ("--model", "switch_transformers", "--public-size", "0.05", "--lr", "3e-3", "--epsilon", "8", "--seed", "0", "--no-progress")
METHODS: tuple[str, ...] = ("nonprivate", "raptor")


@dataclass(frozen=True)
class TaskRun:
    """Per-task settings: expected Poisson batch size, epochs, max length, evaluation period, cap."""

    task: str
    batch_size: int
    epochs: float
    max_length: int
    eval_every: int
    max_train_samples: int | None = None
    #: a task derived from a GLUE one (``stsb3``): the CSV files it is written to, not ``--task``
    derived_from: str | None = None

    def flags(self, data_dir: str | None = None, work: Path | None = None) -> list[str]:
        if self.derived_from is None:
            head = ["--task", self.task]
        else:
            train, dev = derived_paths(self.task, Path(work))
            head = ["--train-file", str(train), "--validation-file", str(dev),
                    "--text-column", "sentence1", "sentence2", "--label-column", "label"]
        out = [*head, "--batch-size", str(self.batch_size), "--epochs", f"{self.epochs:g}",
               "--max-length", str(self.max_length), "--set", f"eval_every={self.eval_every}"]
        if self.max_train_samples is not None:
            out += ["--set", f"data.max_train_samples={self.max_train_samples}"]
        return out


TASKS: dict[str, TaskRun] = {t.task: t for t in (
    TaskRun("sst2", batch_size=256, epochs=2, max_length=48, eval_every=20, max_train_samples=10_000),
    TaskRun("mrpc", batch_size=128, epochs=5, max_length=128, eval_every=34),
    TaskRun("rte", batch_size=128, epochs=5, max_length=128, eval_every=23),
    TaskRun("stsb", batch_size=128, epochs=8, max_length=64, eval_every=86),
    TaskRun("wnli", batch_size=64, epochs=10, max_length=128, eval_every=24),
    TaskRun("stsb3", batch_size=128, epochs=8, max_length=64, eval_every=86, derived_from="stsb"),
)}


def derived_paths(task: str, work: Path) -> tuple[Path, Path]:
    """Where a derived task's train and dev CSV files go (written by :data:`DERIVED` before its run)."""
    return work / f"{task}_train.csv", work / f"{task}_dev.csv"


def stsb3_files(data_dir: Path, work: Path) -> tuple[Path, Path]:
    """A 3-class task from STS-B (GLUE has no 3-class task in ../shared): its similarity score binned
    into ``low`` (< 2), ``mid`` (2 to < 3.5) and ``high`` (>= 3.5), as two CSV files in ``work``
    (train from train.tsv, dev from dev.tsv; the same records, the labels binned)."""
    import csv

    work.mkdir(parents=True, exist_ok=True)
    out = []
    for split, target in zip(("train", "dev"), derived_paths("stsb3", work), strict=True):
        with (data_dir / "STS-B" / f"{split}.tsv").open(newline="", encoding="utf-8") as fh, \
                target.open("w", newline="", encoding="utf-8") as dst:
            rows = csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
            w = csv.writer(dst)
            w.writerow(["sentence1", "sentence2", "label"])
            for r in rows:
                score = float(r["score"])
                w.writerow([r["sentence1"], r["sentence2"], "low" if score < 2 else "mid" if score < 3.5 else "high"])
        out.append(target)
    return out[0], out[1]


DERIVED = {"stsb3": stsb3_files}


def command(task: TaskRun, method: str, data_dir: str, out_dir: Path, extra: Sequence[str] = ()) -> list[str]:
    """The ``raptor train`` arguments of one run (after ``raptor train``); ``extra`` comes last, so
    its flags win over ``COMMON``'s (argparse keeps the last value)."""
    source = [] if task.derived_from is not None else ["--data-dir", data_dir]
    return [*task.flags(data_dir, out_dir.parent), *source, "--method", method, *COMMON, *extra,
            "--output-dir", str(out_dir)]


def shown_command(argv: list[str]) -> str:
    return ".venv/bin/raptor train " + shlex.join(argv)


def run_one(argv: list[str], out_dir: Path, threads: int) -> dict:
    """``raptor train argv`` in a subprocess with ``threads`` torch threads, its output in
    ``out_dir/train.log``; returns (and writes to ``out_dir/run_meta.json``) its wall and CPU
    seconds and the load average around it (the machine is shared: wall time depends on the load)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    out_dir.mkdir(parents=True, exist_ok=True)
    before, load_before, start = resource.getrusage(resource.RUSAGE_CHILDREN), os.getloadavg()[0], time.perf_counter()
    with (out_dir / "train.log").open("w") as fh:
        subprocess.run([sys.executable, "-m", "raptor.cli.main", "train", *argv], env=env, stdout=fh,
                       stderr=subprocess.STDOUT, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    meta = {"wall_seconds": time.perf_counter() - start, "threads": threads,
            "cpu_seconds": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "load_average_1min": [load_before, os.getloadavg()[0]]}
    (out_dir / "run_meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def row_of(task: str, method: str, argv: list[str], res: dict, meta: dict | None = None) -> dict:
    """One summary row from a run's ``results.json`` (and ``run_meta.json``, when there is one)."""
    meta = meta or {}
    return {
        "task": task, "method": method, "main_metric": res["main_metric"], "metrics": res["final_metrics"],
        "epsilon": res["epsilon"], "delta": res["delta"], "sigma": res["sigma"], "steps": res["steps"],
        "sample_rate": res["sample_rate"], "seconds": res["total_seconds"], "cpu_seconds": meta.get("cpu_seconds"),
        "load_average_1min": meta.get("load_average_1min"),
        "seconds_per_step": res["seconds_per_step"], "trained_layers": res.get("trained_layers"),
        "data": res["data"], "evals": [{"step": e["step"], **e["metrics"]} for e in res["evals"]],
        "command": shown_command(argv),
    }


def _num(value, fmt: str) -> str:
    """A number for the table: None is "-", the strings "inf"/"nan" (strict JSON) stay as they are."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return "∞" if value == "inf" else value
    return format(float(value), fmt)


def table(rows: list[dict]) -> str:
    """The markdown table: one row per run."""
    lines = ["| task | method | dev metrics | ε | δ | σ (shared, expert) | updates | seconds (wall, CPU) | command |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        metrics = ", ".join(f"{k} {_num(v, '.3f')}" for k, v in r["metrics"].items())
        sigma = r["sigma"] or {}
        sig = "-" if not any(v for v in sigma.values()) else \
            ", ".join(_num(sigma.get(k), ".3f") for k in ("shared", "expert"))
        lines.append(f"| {r['task']} | {r['method']} | {metrics} | {_num(r['epsilon'], '.2f')} | "
                     f"{_num(r['delta'], '.0e')} | {sig} | {r['steps']} | {_num(r['seconds'], '.0f')}, "
                     f"{_num(r.get('cpu_seconds'), '.0f')} | "
                     f"`{r['command']}` |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--data-dir", default="../shared/data/glue")
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--threads", type=int, default=1, help="torch threads per run (OMP_NUM_THREADS; default 1)")
    p.add_argument("--runs-dir", default="runs/glue_tasks")
    p.add_argument("--out", default=str(HERE / "results" / "glue_tasks"),
                   help="summary path without suffix: writes OUT.json and OUT.md")
    p.add_argument("--force", action="store_true", help="rerun even where results.json exists")
    p.add_argument("--train-flags", default="",
                   help="more raptor train flags for every run, after the common ones (they win), e.g. "
                        "'--model minilm-moe --lora --lr 5e-3'")
    args = p.parse_args(argv)
    extra = shlex.split(args.train_flags)
    if args.threads < 1:
        p.error(f"--threads must be >= 1, got {args.threads}")

    rows = []
    for name in args.tasks:
        for method in args.methods:
            out_dir = Path(args.runs_dir) / f"{name}_{method}"
            run_argv = command(TASKS[name], method, args.data_dir, out_dir, extra)
            if TASKS[name].derived_from is not None and not all(p.is_file() for p in derived_paths(name, out_dir.parent)):
                DERIVED[name](Path(args.data_dir), out_dir.parent)
            result = out_dir / "results.json"
            meta_file = out_dir / "run_meta.json"
            if result.exists() and not args.force:
                print(f"{name} {method}: reusing {result}", flush=True)
            else:
                meta = run_one(run_argv, out_dir, args.threads)
                print(f"{name} {method}: {meta['wall_seconds']:.0f} s wall, {meta['cpu_seconds']:.0f} s CPU", flush=True)
            meta = json.loads(meta_file.read_text()) if meta_file.exists() else None
            row = row_of(name, method, run_argv, json.loads(result.read_text()), meta)
            shown = ", ".join(f"{k} {_num(v, '.4f')}" for k, v in row["metrics"].items())
            print(f"  {shown}; epsilon {_num(row['epsilon'], '.3f')}, delta {_num(row['delta'], '.0e')}", flush=True)
            rows.append(row)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    settings = {"common_flags": list(COMMON), "train_flags": extra, "tasks": {t: vars(TASKS[t]) for t in args.tasks},
                "threads": args.threads, "data_dir": args.data_dir}
    out.with_suffix(".json").write_text(json.dumps({"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                                     "settings": settings, "runs": rows}, indent=1) + "\n")
    out.with_suffix(".md").write_text(table(rows))
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
