"""Steps of ``benchmarks/gpu_check.sh`` that run in Python: every ``raptor check`` in one process
(:func:`raptor.audit.engine_check.check_all`, the library function the command calls), and
the summary that the script rewrites after every step (so a stop at any point leaves one).

``python benchmarks/gpu_check_steps.py checks --device cuda --out DIR``: ``raptor check FAMILY`` for
every family in float32 and bfloat16, one JSON file per check (``check_FAMILY_DTYPE.json``).

``python benchmarks/gpu_check_steps.py summary --out DIR --step NAME --status RC --seconds S``: records
the step in ``DIR/steps.json`` and rewrites ``DIR/summary.json`` from every result present.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

FAMILIES = ("switch_transformers", "olmoe", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3")
DTYPES = ("float32", "bfloat16")


def run_checks(device: str, out: Path, families=FAMILIES, dtypes=DTYPES) -> int:
    """Every family and dtype in this process; a failure (or a crash) of one does not stop the others."""
    from raptor.audit.engine_check import check_all  # what `raptor check FAMILY --json` runs

    failed = 0
    for fam in families:
        for dt in dtypes:
            t0 = time.perf_counter()
            try:
                report = check_all(fam, dtype=dt, device=device)
                rc = 0 if report["passed"] else 1
            except Exception:  # recorded in the check's file and the summary, never swallowed
                rc, report = 1, {"passed": False, "error": traceback.format_exc()}
            report["seconds"] = time.perf_counter() - t0
            (out / f"check_{fam}_{dt}.json").write_text(json.dumps(report, indent=1) + "\n")
            print(f"raptor check {fam} {dt}: {'PASS' if rc == 0 else 'FAIL'} ({report['seconds']:.1f}s)", flush=True)
            failed += rc != 0
    return 1 if failed else 0


def summarise(out: Path, step: str | None = None, status: int | None = None, seconds: float | None = None) -> dict:
    """Record one finished step and rewrite ``summary.json`` from the results present in ``out``."""
    steps_file = out / "steps.json"
    steps = json.loads(steps_file.read_text()) if steps_file.exists() else []
    if step is not None:
        steps.append({"step": step, "status": status, "seconds": seconds,
                      "outcome": "ok" if status == 0 else "timeout" if status in (124, 137) else "failed"})
        steps_file.write_text(json.dumps(steps, indent=1) + "\n")
    summary: dict = {"steps": steps, "train": {}, "checks": {}, "engine_speed": {}}
    for path in sorted(out.glob("train_*/results.json")):
        r = json.loads(path.read_text())
        summary["train"][path.parent.name] = {k: r.get(k) for k in ("seconds_per_step", "peak_cuda_mib", "peak_rss_mib",
                                                                     "epsilon", "final_accuracy", "world_size")}
    for f in sorted(out.glob("check_*.json")):
        try:
            summary["checks"][f.stem] = bool(json.loads(f.read_text())["passed"])
        except (ValueError, KeyError):
            summary["checks"][f.stem] = False
    for f in sorted(out.glob("engine_speed_*.json")):
        try:
            rows = json.loads(f.read_text())["results"]
        except (ValueError, KeyError):
            continue
        summary["engine_speed"][f.stem] = [
            {"config": r.get("label"), "time_ratio": r.get("time_ratio"), "kernel_ratio": r.get("kernel_ratio"),
             "aten_op_ratio": r.get("aten_op_ratio"), "peak_cuda_mib": r.get("peak_cuda_mib"), "error": r.get("error")}
            for r in rows]
    eps = {v["epsilon"] for k, v in summary["train"].items() if k.endswith("float32")}
    summary["passed"] = (bool(steps) and all(s["status"] == 0 for s in steps) and all(summary["checks"].values())
                         and len(eps) <= 1
                         and all(r["error"] is None for rows in summary["engine_speed"].values() for r in rows))
    try:
        import torch

        summary["environment"] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                                  "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    except Exception as err:  # the summary is written whatever fails
        summary["environment"] = {"error": repr(err)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("checks")
    c.add_argument("--device", default="cuda")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    s = sub.add_parser("summary")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--step", default=None)
    s.add_argument("--status", type=int, default=None)
    s.add_argument("--seconds", type=float, default=None)
    s.add_argument("--final", action="store_true", help="print the summary; exit 1 unless it passed")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.cmd == "checks":
        return run_checks(args.device, args.out, tuple(args.families))
    summary = summarise(args.out, args.step, args.status, args.seconds)
    if args.final:
        print(json.dumps(summary, indent=2))
        return 0 if summary["passed"] else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
