"""C7 on two tables side by side: RAPTOR's margin against EACH baseline, at the paper's settings
and under matched tuning, per model, task and epsilon.

    python experiments/claims_tables.py            # writes experiments/results/claims_c7.{json,md,png}

The *paper's settings* table is a ``--space reference`` grid (every method at the reference
grid's own batch size, learning rate and epochs: raptor.recipes.REFERENCE_GRID); its final cells
are read from the grid's JSONL files as they are (one fixed configuration per method, no
selection). The *matched* table is a tuned grid (every method at the same B and epochs, the
learning rate selected on the declared-public selection split): its ``--summarize`` JSON is read,
so that only the selected configuration's final cells count. Both read only finished cells; a
table with fewer seeds than asked says so (``n`` in every cell).

Margin = RAPTOR's mean - the baseline's mean (dev metric); se = sqrt(s1^2/n1 + s2^2/n2) with
sample standard deviations; a win or a loss only where |margin| > 2 se, a tie otherwise (a pair
with one seed on either side has no se and is marked "one seed").
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

#: what each baseline is, in the tables' words (grid method -> description)
DESCRIPTIONS = {
    "naive_dp": "naive_dp: dp-lora at B 16, lr 1e-4, 5 epochs (the reference's dense baseline)",
    "naive_dp_no_lora": "naive_dp_no_lora: dpsgd-full, full weights, B 16, lr 2e-5, 5 epochs",
    "baseline_a": "baseline_a: dpsgd (RAPTOR's set, one clip), B 1024, lr 2e-4, 3 epochs",
    "baseline_b": "baseline_b: shared-only, B 1024, lr 2e-4, 3 epochs",
    "baseline_c": "baseline_c: expert-only, B 1024, lr 2e-4, 3 epochs",
    "baseline_e": "baseline_e: last-layer, B 1024, lr 2e-4, 3 epochs",
    "dpsgd": "dpsgd (matched: RAPTOR's set, one clip)",
    "dp-lora": "dp-lora (matched: LoRA everywhere + head, one clip)",
    "dpsgd-full": "dpsgd-full (matched: every layer's experts, one clip)",
    "last-layer": "last-layer (matched)",
    "nonprivate": "non-private ceiling",
}


@dataclass(frozen=True)
class Table:
    """One (model, task) of the C7 tables: where its paper-settings cells and matched summaries are."""

    model: str                      # display name
    task: str
    reference_grids: tuple[str, ...]  # --space reference grids (their JSONL files, read as they are)
    matched_summaries: tuple[str, ...]  # tuned grids' --summarize JSON files (selected finals only)
    note: str = ""


TABLES = (
    Table("minilm-moe", "sst2", ("sst2_minilm_reference",), ("sst2_minilm.json", "sst2_minilm_matched.json"),
          note="4,000 private SST-2 records (a seeded subsample; 500 + 500 declared-public records carved "
               "from the training split), GLUE dev (872) reported; paper settings at max length 128, matched "
               "at B 256, 2 epochs, max length 40, lr from {5e-3, 2e-3}; the head fitted on the public slice "
               "(public-fit). Matched eps 1 and 8 ran on build v1, eps 0.5 and every paper-settings cell on "
               "build v2 (the same function: v2 only drops the attention key bias, which softmax ignores)."),
    Table("minilm-moe", "mrpc", ("mrpc_minilm_reference",), ("mrpc_minilm_matched.json",),
          note="MRPC's whole training split (3,668) less 500 + 500 declared-public records; dev (408) reported."),
    Table("switch-public-tiny", "sst2", ("sst2_switch_reference",), ("sst2_paper_3lr.json",),
          note="the shipped warm Switch; matched: the full SST-2 table (66,349 private records, B 1024, "
               "3 epochs, lr from {5e-4, 2e-3, 8e-3}, label-word head)."),
)


def _eps_key(eps) -> float:
    return math.inf if eps is None else float(eps)


def reference_rows(grid: str, results: Path) -> dict[tuple[str, float | None], list[float]]:
    """{(method, epsilon): dev metrics of the finished final cells} of a --space reference grid."""
    out: dict = defaultdict(list)
    seen = set()
    for path in sorted(results.glob(f"{grid}*.jsonl")):
        if not (path.name == f"{grid}.jsonl" or path.name.startswith(f"{grid}.shard")):
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("status", "ok") != "ok" or r["cell"].get("stage") != "final" or r["key"] in seen:
                continue
            seen.add(r["key"])
            c = r["cell"]
            out[(c["method"], c["epsilon"])].append(float(r["result"]["metric"]))
    return out


def matched_rows(summary_file: str, results: Path, task: str) -> dict[tuple[str, float | None], list[float]]:
    path = results / summary_file
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    out: dict = defaultdict(list)
    for row in data["summary"]:
        if row["task"] == task:
            out[(row["method"], row["target_epsilon"])].extend(row["values"])
    return out


def stats(values: Sequence[float]) -> dict:
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "n": len(values), "values": list(values)}


def margin(mine: Mapping, other: Mapping) -> dict:
    m = mine["mean"] - other["mean"]
    if mine["n"] < 2 or other["n"] < 2:
        return {"margin": m, "se": None, "verdict": "one seed"}
    se = math.sqrt(mine["std"] ** 2 / mine["n"] + other["std"] ** 2 / other["n"])
    verdict = "tie" if abs(m) <= 2 * se else ("win" if m > 0 else "loss")
    return {"margin": m, "se": se, "verdict": verdict}


def setting_table(rows: Mapping[tuple[str, float | None], list[float]]) -> dict:
    """Per method and epsilon: stats; per epsilon: RAPTOR's margin against every other DP method."""
    cells = {(m, e): stats(v) for (m, e), v in rows.items() if v}
    out = {"cells": [{"method": m, "epsilon": e, **s} for (m, e), s in sorted(cells.items(),
                                                                               key=lambda kv: (kv[0][0], _eps_key(kv[0][1])))],
           "margins": []}
    for (m, e), s in sorted(cells.items(), key=lambda kv: (_eps_key(kv[0][1]), kv[0][0])):
        if m.startswith("raptor") or m == "nonprivate" or e is None:  # RAPTOR's own variants are no baseline
            continue
        mine = cells.get(("raptor", e))
        if mine is not None:
            out["margins"].append({"epsilon": e, "baseline": m, "raptor": mine["mean"], "baseline_mean": s["mean"],
                                   "n_raptor": mine["n"], "n_baseline": s["n"], **margin(mine, s)})
    return out


def _fmt(s: Mapping) -> str:
    return f"{s['mean']:.3f} ({s['n']})" if s["n"] < 2 else f"{s['mean']:.3f} ± {s['std']:.3f} ({s['n']})"


def _fmt_margin(r: Mapping) -> str:
    if r["se"] is None:
        return f"{r['margin']:+.3f} (one seed)"
    return f"{r['margin']:+.3f} (se {r['se']:.3f}): {r['verdict']}"


def markdown(table: Table, paper: Mapping, matched: Mapping) -> list[str]:
    md = [f"### {table.model} / {table.task}", "", table.note, ""]
    for title, t in (("the paper's settings", paper), ("matched tuning", matched)):
        md.append(f"**{title}** (dev metric, mean ± sd (seeds))")
        md.append("")
        if not t["cells"]:
            md += ["no finished cell yet", ""]
            continue
        eps = sorted({c["epsilon"] for c in t["cells"]}, key=_eps_key)
        md.append("| method | " + " | ".join("non-private" if e is None else f"ε = {e:g}" for e in eps) + " |")
        md.append("|---|" + "---|" * len(eps))
        by = {(c["method"], c["epsilon"]): c for c in t["cells"]}
        for m in sorted({c["method"] for c in t["cells"]}, key=lambda m: (m != "raptor", m == "nonprivate", m)):
            md.append(f"| {m} | " + " | ".join(_fmt(by[(m, e)]) if (m, e) in by else "" for e in eps) + " |")
        md.append("")
        if t["margins"]:
            md += ["| ε | RAPTOR against | margin (se): verdict |", "|---|---|---|"]
            md += [f"| {r['epsilon']:g} | {DESCRIPTIONS.get(r['baseline'], r['baseline'])} | {_fmt_margin(r)} |"
                   for r in t["margins"]]
            md.append("")
    return md


def plot(results: Sequence[Mapping], path: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(r, kind) for r in results for kind in ("paper", "matched") if r[kind]["margins"]]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, (r, kind) in zip(axes[0], panels):
        by: dict = defaultdict(list)
        for m in r[kind]["margins"]:
            by[m["baseline"]].append(m)
        for k, (baseline, ms) in enumerate(sorted(by.items())):
            ms = sorted(ms, key=lambda m: m["epsilon"])
            xs = [m["epsilon"] * (1 + 0.06 * (k - len(by) / 2)) for m in ms]
            ys = [m["margin"] for m in ms]
            err = [2 * m["se"] if m["se"] is not None else 0.0 for m in ms]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=baseline)
        ax.axhline(0.0, color="k", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("target ε")
        ax.set_title(f"{r['model']} / {r['task']}: {'paper settings' if kind == 'paper' else 'matched'}", fontsize=9)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("RAPTOR − baseline (dev), ± 2 se")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0])
    p.add_argument("--results-dir", default=str(RESULTS))
    p.add_argument("--out", default="claims_c7", help="writes <out>.json, <out>.md and <out>.png in --results-dir")
    args = p.parse_args(argv)
    results = Path(args.results_dir)
    out, md = [], ["# C7: RAPTOR against each baseline, at the paper's settings and under matched tuning", "",
                   "Regenerate: `python experiments/claims_tables.py` (after `run_grid.py --summarize` of the "
                   "matched grids). Margin = RAPTOR − baseline; se = √(s₁²/n₁ + s₂²/n₂); a win or a loss only "
                   "where |margin| > 2 se.", ""]
    for table in TABLES:
        paper_rows: dict = defaultdict(list)
        for g in table.reference_grids:
            for k, v in reference_rows(g, results).items():
                paper_rows[k].extend(v)
        matched: dict = defaultdict(list)
        for f in table.matched_summaries:
            for k, v in matched_rows(f, results, table.task).items():
                matched[k].extend(v)
        entry = {"model": table.model, "task": table.task, "note": table.note,
                 "reference_grids": list(table.reference_grids), "matched_summaries": list(table.matched_summaries),
                 "paper": setting_table(paper_rows), "matched": setting_table(matched)}
        if entry["paper"]["cells"] or entry["matched"]["cells"]:
            out.append(entry)
            md += markdown(table, entry["paper"], entry["matched"])
    png = plot(out, results / f"{args.out}.png")
    doc = {"tables": out, "plot": None if png is None else str(png.relative_to(HERE.parent)) if png.is_relative_to(HERE.parent) else str(png),
           "command": "python experiments/claims_tables.py " + " ".join(sys.argv[1:] if argv is None else argv)}
    (results / f"{args.out}.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    (results / f"{args.out}.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
