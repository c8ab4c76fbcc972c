"""From grid records to the paper's table: matched tuning, mean +- std over seeds, a markdown table
and a metric-vs-epsilon plot per (model, task).

Records are the JSON lines written by :func:`raptor.analysis.grid.run_grid`; each has
``cell`` (model, task, method, epsilon, seed, stage, hparams) and ``result`` with at least
``metric`` (the task's main metric on the reported split) and, for tuning cells,
``selection_metric`` (the same metric on the selection split carved from the training data).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from raptor.evaluation.figures import save_figure

Group = tuple[str, str, str, Any]  # (model, task, method, epsilon)

#: one fixed colour per method of :data:`raptor.training.config.METHODS` (distinct: tested), so that
#: a method has the same colour in every plot whatever else is drawn with it
METHOD_COLOURS: dict[str, str] = {
    "nonprivate": "tab:gray",
    "dpsgd": "tab:blue",
    "dp-lora": "tab:orange",
    "shared-only": "tab:green",
    "expert-only": "tab:purple",
    "last-layer": "tab:brown",
    "raptor": "tab:red",
    "dpsgd-full": "tab:cyan",
}


def method_colour(method: str, colours: Mapping[str, str] | None = None) -> str:
    """The fixed colour of ``method``: :data:`METHOD_COLOURS`, or ``colours`` (a grid's own methods)."""
    colour = {**METHOD_COLOURS, **(colours or {})}.get(method)
    if colour is None:
        raise ValueError(f"no plot colour for method {method!r}; add one to raptor.analysis.paper_table.METHOD_COLOURS "
                         "(a library method) or pass it in colours")
    return colour


def _group(record: Mapping) -> Group:
    c = record["cell"]
    return (c["model"], c["task"], c["method"], c["epsilon"])


def _hkey(hparams: Mapping[str, Any]) -> tuple:
    return tuple(sorted(hparams.items()))


def select_best(records: Iterable[Mapping], *, metric: str = "selection_metric",
                higher_is_better: bool = True) -> dict[Group, dict[str, Any]]:
    """Per (model, task, method, epsilon): the hyperparameters of the tuning cells with the best mean
    ``result[metric]`` over their seeds. Ties go to the configuration listed first. A non-finite
    metric (a diverged run) ranks last."""
    scores: dict[Group, dict[tuple, list[float]]] = defaultdict(dict)
    for r in records:
        if r["cell"].get("stage") != "tune":
            continue
        value = float(r["result"][metric])
        scores[_group(r)].setdefault(_hkey(r["cell"]["hparams"]), []).append(value)
    best = {}
    sign = 1.0 if higher_is_better else -1.0
    for group, by_h in scores.items():
        def rank(item):
            vals = item[1]
            mean = sum(vals) / len(vals)
            return sign * mean if math.isfinite(mean) else -math.inf
        hk, _ = max(by_h.items(), key=rank)
        best[group] = dict(hk)
    return best


def summarize(records: Iterable[Mapping], *, metric: str = "metric") -> dict[Group, dict[str, Any]]:
    """Per (model, task, method, epsilon) over the final cells: mean, std (sample, n-1; 0 for one
    seed), per-seed values, the hyperparameters, and the mean epsilon/delta from the ledger."""
    rows: dict[Group, list[Mapping]] = defaultdict(list)
    for r in records:
        if r["cell"].get("stage", "final") == "final":
            rows[_group(r)].append(r)
    out = {}
    for group, rs in rows.items():
        rs = sorted(rs, key=lambda r: r["cell"]["seed"])
        values = [float(r["result"][metric]) for r in rs]
        eps = [r["result"].get("epsilon") for r in rs]
        out[group] = {
            "model": group[0], "task": group[1], "method": group[2], "target_epsilon": group[3],
            "mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "values": values, "seeds": [r["cell"]["seed"] for r in rs], "n": len(values),
            "hparams": dict(rs[0]["cell"]["hparams"]),
            "epsilon_spent": [e if e is None or isinstance(e, str) else float(e) for e in eps],
            "delta": rs[0]["result"].get("delta"),
            "metric_name": rs[0]["result"].get("metric_name"),
            "wall_seconds": [r.get("wall_seconds") for r in rs],
        }
    return out


def margins(summary: Mapping[Group, Mapping], *, method: str = "raptor",
            exclude: Sequence[str] = ("nonprivate",)) -> list[dict[str, Any]]:
    """For every (model, task, epsilon) with ``method``: the best OTHER DP method by mean, the margin
    (method mean - best other mean) and its std (sqrt of the sum of the two variances of the means),
    and a verdict: "win"/"loss" when |margin| > 2 std of the difference, else "tie"."""
    by_setting: dict[tuple, dict[str, Mapping]] = defaultdict(dict)
    for (model, task, m, eps), row in summary.items():
        by_setting[(model, task, eps)][m] = row
    out = []
    for (model, task, eps), rows in sorted(by_setting.items(), key=lambda kv: (kv[0][0], kv[0][1], _eps_sort(kv[0][2]))):
        if method not in rows:
            continue
        others = {m: r for m, r in rows.items() if m != method and m not in exclude}
        if not others:
            continue
        best_m, best = max(others.items(), key=lambda kv: kv[1]["mean"])
        mine = rows[method]
        se = math.sqrt(mine["std"] ** 2 / max(mine["n"], 1) + best["std"] ** 2 / max(best["n"], 1))
        margin = mine["mean"] - best["mean"]
        verdict = "tie" if abs(margin) <= 2 * se else ("win" if margin > 0 else "loss")
        out.append({"model": model, "task": task, "epsilon": eps, "method": method, "mean": mine["mean"],
                    "std": mine["std"], "best_baseline": best_m, "baseline_mean": best["mean"],
                    "baseline_std": best["std"], "margin": margin, "margin_se": se, "verdict": verdict})
    return out


def _eps_sort(eps) -> float:
    return math.inf if eps is None else float(eps)


def _cell(row: Mapping, digits: int) -> str:
    """``mean ± std (n)``; one seed has no spread, so it reads ``mean (1)`` rather than a false ``± 0``."""
    if row["n"] < 2:
        return f"{row['mean']:.{digits}f} ({row['n']})"
    return f"{row['mean']:.{digits}f} ± {row['std']:.{digits}f} ({row['n']})"


def markdown_table(summary: Mapping[Group, Mapping], *, model: str, task: str, digits: int = 3) -> str:
    """Methods as rows, target epsilons as columns, ``mean +- std (n)`` in each cell (``mean (1)`` for one seed)."""
    rows = {k: v for k, v in summary.items() if k[0] == model and k[1] == task}
    if not rows:
        return ""
    epsilons = sorted({k[3] for k in rows}, key=_eps_sort)
    methods = list(dict.fromkeys(k[2] for k in sorted(rows, key=lambda k: k[2])))
    metric = next(iter(rows.values())).get("metric_name") or "metric"
    head = "| method | " + " | ".join("non-private" if e is None else f"ε = {e:g}" for e in epsilons) + " |"
    lines = [f"**{model} / {task}** ({metric}, mean ± std over seeds)", "", head,
             "|" + "---|" * (len(epsilons) + 1)]
    for m in methods:
        cells = []
        for e in epsilons:
            r = rows.get((model, task, m, e))
            cells.append("" if r is None else _cell(r, digits))
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_metric_vs_epsilon(summary: Mapping[Group, Mapping], path: str | Path, *, model: str, task: str,
                           colours: Mapping[str, str] | None = None) -> Path:
    """One line per DP method (mean ± std against target epsilon, log x), the non-private level dashed;
    each method in its fixed colour (:data:`METHOD_COLOURS`; ``colours``: those of a grid's own
    methods, :func:`method_colour`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    draw_metric_vs_epsilon(ax, summary, model=model, task=task, colours=colours)
    return save_figure(fig, path)


def draw_metric_vs_epsilon(ax, summary: Mapping[Group, Mapping], *, model: str, task: str,
                           colours: Mapping[str, str] | None = None) -> None:
    """The plot of :func:`plot_metric_vs_epsilon` on a matplotlib ``ax``."""
    rows = {k: v for k, v in summary.items() if k[0] == model and k[1] == task}
    metric = next(iter(rows.values())).get("metric_name") or "metric" if rows else "metric"
    for m in sorted({k[2] for k in rows}):
        colour = method_colour(m, colours)
        pts = sorted(((k[3], v) for k, v in rows.items() if k[2] == m), key=lambda kv: _eps_sort(kv[0]))
        if m == "nonprivate" or all(e is None for e, _ in pts):
            for _, v in pts:
                ax.axhline(v["mean"], color=colour, linestyle="--", label=f"{m} ({v['mean']:.3f})")
            continue
        xs = [float(e) for e, _ in pts if e is not None]
        ys = [v["mean"] for e, v in pts if e is not None]
        errs = [v["std"] for e, v in pts if e is not None]
        ax.errorbar(xs, ys, yerr=errs, marker="o", markersize=4, capsize=3, label=m, color=colour,
                    linewidth=2.5 if m == "raptor" else 1.2)
    ax.set_xscale("log")
    epsilons = sorted({float(k[3]) for k in rows if k[3] is not None})
    if epsilons:  # the grid's epsilons as the ticks, written plainly (not 2 x 10^0)
        from matplotlib.ticker import NullFormatter, NullLocator

        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
    ax.set_xlabel("target ε (δ fixed)")
    ax.set_ylabel(metric)
    ax.set_title(f"{model} / {task}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
