"""Does the public routing-entropy rule pick the layer worth protecting? A layer-by-layer sweep.

RAPTOR trains the experts of the layer(s) that ``layers="auto"`` picks (the highest public routing
entropy, :mod:`raptor.roles.layer_choice`). This sweep trains RAPTOR once per MoE layer (``layers=K``)
and once under the rule, in the minilm-moe cells of ``experiments/minilm_ablations.py`` (SST-2, 4,000
private records, the declared-public 500-record slice, epsilon 1), and reports each layer's dev
accuracy next to the rule's pick:

    python experiments/layer_rule.py --seeds 0 1            # run the missing cells, then summarise
    python experiments/layer_rule.py --summarize-only       # the table from the finished cells

Resumable: every finished cell is a line of ``--results`` (default
experiments/results/sst2_minilm_layer_rule.jsonl) and is skipped on a rerun. Writes ``.md`` and
``.json`` summaries next to it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT = HERE / "results" / "sst2_minilm_layer_rule.jsonl"
LAYERS = ("auto", "0", "1", "2", "3", "4", "5")


def run_cells(seeds, epsilon: float, lr: float, results: Path, threads: int) -> None:
    for layer in LAYERS:
        subprocess.run([sys.executable, str(HERE / "minilm_ablations.py"), "--methods", "raptor", "--epsilon",
                        f"{epsilon:g}", "--seeds", *map(str, seeds), "--lr", f"{lr:g}", "--set", f"layers={layer}",
                        "--threads", str(threads), "--results", str(results)], check=True)


def summarize(results: Path) -> dict:
    cells: dict[str, dict[int, dict]] = {}
    for line in results.read_text().splitlines():
        d = json.loads(line)
        if "result" not in d:  # a cell still claimed, not finished
            continue
        cells.setdefault(str(d["cell"]["hparams"]["layers"]), {})[d["cell"]["seed"]] = {
            "accuracy": d["result"]["metric"], "trained_layers": d["result"]["trained_layers"],
            "epsilon": d["result"]["epsilon"], "model": d["cell"]["model"]}
    rows = []
    for layer in LAYERS:
        by_seed = cells.get(layer, {})
        accs = [v["accuracy"] for v in by_seed.values()]
        rows.append({"layers": layer, "seeds": sorted(by_seed), "accuracy_mean": statistics.fmean(accs) if accs else None,
                     "accuracies": {s: v["accuracy"] for s, v in sorted(by_seed.items())},
                     "trained_layers": sorted({tuple(v["trained_layers"]) for v in by_seed.values()})})
    fixed = [r for r in rows if r["layers"] != "auto" and r["accuracy_mean"] is not None]
    best = max(fixed, key=lambda r: r["accuracy_mean"]) if fixed else None
    summary = {"rows": rows, "best_fixed_layer": best and best["layers"],
               "auto": next(r for r in rows if r["layers"] == "auto")}
    lines = ["| layers | seeds | dev accuracy (mean) | per seed | trained |", "|---|---|---|---|---|"]
    for r in rows:
        mean = "-" if r["accuracy_mean"] is None else f"{r['accuracy_mean']:.4f}"
        per = ", ".join(f"{a:.4f}" for a in r["accuracies"].values())
        lines.append(f"| {r['layers']} | {len(r['seeds'])} | {mean} | {per} | {r['trained_layers']} |")
    results.with_suffix(".md").write_text("\n".join(lines) + "\n")
    results.with_suffix(".json").write_text(json.dumps(summary, indent=2, default=list) + "\n")
    print("\n".join(lines))
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--results", type=Path, default=DEFAULT)
    p.add_argument("--summarize-only", action="store_true")
    args = p.parse_args(argv)
    if not args.summarize_only:
        run_cells(args.seeds, args.epsilon, args.lr, args.results, args.threads)
    summarize(args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
