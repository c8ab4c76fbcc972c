"""The issue-33 tables from the finished cells: the minilm-moe grid and its ablations, as markdown.

    python experiments/minilm_summary.py > experiments/results/sst2_minilm_summary.md

Reads ``experiments/results/sst2_minilm*.jsonl`` (the grid's shards) and
``sst2_minilm_ablations.jsonl``; groups the FINAL cells (dev split) by (model, method, epsilon,
settings that differ from the table's), and prints mean +- sample sd over seeds, and each
RAPTOR row's margin over the best other DP method at the same epsilon with its standard error
se = sqrt(s1^2/n1 + s2^2/n2): a win or a loss only where |margin| > 2 se, a tie otherwise. The
rival is the best non-RAPTOR DP row (more than one seed) at the same epsilon, model and optimizer,
from the table or from the ablations (epsilon 0.5 has no tuned table: its rows are ablations).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
#: hparams that every cell shares or that identify the protocol, left out of a row's label
COMMON = {"n_pub", "n_sel", "n_train", "max_len", "B", "epochs", "head", "clip", "lora", "freeze_head", "layers",
          "clip_rule"}


def cells(paths) -> list[dict]:
    out = []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            r = json.loads(line)
            if r.get("status", "ok") != "ok" or r["cell"].get("stage") != "final":
                continue
            out.append(r)
    return out


def label(r: dict, source: str) -> tuple:
    c = r["cell"]
    h = {k: v for k, v in c["hparams"].items() if k not in COMMON}
    model = c["model"].split("@")[0]
    extra = ", ".join(f"{k} {v}" for k, v in sorted(h.items()))
    return (c["epsilon"] if c["epsilon"] is not None else math.inf, model, c["method"], extra, source)


def main() -> int:
    grid = sorted(RESULTS.glob("sst2_minilm.shard*.jsonl")) + sorted(RESULTS.glob("sst2_minilm.jsonl"))
    abl = RESULTS / "sst2_minilm_ablations.jsonl"
    groups: dict[tuple, list[float]] = defaultdict(list)
    for source, paths in (("table", grid), ("ablation", [abl] if abl.exists() else [])):
        for r in cells(paths):
            groups[label(r, source)].append(float(r["result"]["metric"]))
    print("| ε | model | method | settings | dev accuracy (mean ± sd) | seeds | source |")
    print("|---|---|---|---|---|---|---|")
    stats = {}
    for key in sorted(groups, key=lambda k: (k[0], k[4] != "table", k[1], k[2], k[3])):
        xs = groups[key]
        m = statistics.fmean(xs)
        s = statistics.stdev(xs) if len(xs) > 1 else float("nan")
        stats[key] = (m, s, len(xs))
        eps = "∞" if key[0] == math.inf else f"{key[0]:g}"
        print(f"| {eps} | {key[1]} | {key[2]} | {key[3]} | {m:.3f} ± {s:.3f} | {len(xs)} | {key[4]} |")
    print()
    print("RAPTOR rows against the best other DP method (3 seeds) at the same epsilon, model and optimizer:")
    print()
    print("| ε | model | raptor settings | margin | se | verdict | against |")
    print("|---|---|---|---|---|---|---|")
    for key, (m, s, n) in stats.items():
        eps, model, method, extra, _ = key
        if method != "raptor" or eps == math.inf:
            continue
        sgd = "opt sgd" in extra  # compare an SGD row with SGD rivals, an AdamW row with AdamW ones
        rivals = [(k, v) for k, v in stats.items() if k[0] == eps and k[1] == model and ("opt sgd" in k[3]) == sgd
                  and k[2] not in ("raptor", "nonprivate") and v[2] > 1]
        if not rivals or n < 2:
            continue
        (rk, (rm, rs, rn)) = max(rivals, key=lambda kv: kv[1][0])
        margin = m - rm
        se = math.sqrt(s * s / n + rs * rs / rn)
        verdict = "win" if margin > 2 * se else "loss" if margin < -2 * se else "tie"
        print(f"| {eps:g} | {model} | {extra} | {margin:+.3f} | {se:.3f} | {verdict} | {rk[2]} ({rm:.3f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
