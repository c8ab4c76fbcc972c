"""Continued public pre-training of minilm-moe (issue 33, item 3): did the experts move apart?

    python experiments/minilm_cpt.py --base <minilm-moe dir> --cpt /root/runs/minilm-moe-cpt \\
        --out experiments/results/minilm_cpt/divergence.json

Per MoE layer, for each of the two models:
* expert spread: mean over expert pairs (i, j) of ||W_i - W_j||_F / mean_e ||W_e||_F, over the
  concatenated wi and wo weights (0 for copies);
* drift: ||W_e(cpt) - W_e(base)||_F / ||W_e(base)||_F, mean over experts (cpt only), and the same for
  the router weight;
* routing on the SST-2 public slice (the ablations' 500 declared-public records, max length 40):
  load shares, load entropy / log E, mean per-token router entropy, owner shares (owner = the
  record's modal expert), from :func:`raptor.pretrain.routing.routing_statistics`.
Reads only public data (the public slice) and the two weight files.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

HERE = Path(__file__).resolve().parent


def expert_weights(sd: dict, layer: int) -> list[torch.Tensor]:
    out, e = [], 0
    while f"bert.layers.{layer}.mlp.experts.expert_{e}.wi.weight" in sd:
        p = f"bert.layers.{layer}.mlp.experts.expert_{e}."
        out.append(torch.cat([sd[p + "wi.weight"].float().reshape(-1), sd[p + "wo.weight"].float().reshape(-1)]))
        e += 1
    return out


def spread(ws: list[torch.Tensor]) -> float:
    scale = sum(float(w.norm()) for w in ws) / len(ws)
    pairs = [float((a - b).norm()) / scale for a, b in itertools.combinations(ws, 2)]
    return sum(pairs) / len(pairs)


def summarize(paths: list[str]) -> str:
    """Per model and setting: mean ± sample std over seeds; raptor - dpsgd paired over seeds (se = std of the
    per-seed differences / sqrt(n)) where both ran at the same overrides."""
    import statistics as st

    cells: dict = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            r = json.loads(line)
            c = r["cell"]
            h = c["hparams"]
            if (c.get("stage") != "final" or "metric" not in (r.get("result") or {}) or c["epsilon"] != 1.0
                    or c["method"] not in ("raptor", "dpsgd") or h.get("lr") != 5e-3
                    or h.get("opt", "adamw") != "adamw"):
                continue  # the epsilon-1, lr 5e-3, AdamW final cells only
            ratio = h.get("shared_ratio")
            key = (c["model"], c["epsilon"], c["method"], ratio if c["method"] == "raptor" else None)
            cells.setdefault(key, {})[c["seed"]] = r["result"]["metric"]
    lines = ["| model | method | shared ratio | per seed (0, 1, 2) | mean ± std |", "|---|---|---|---|---|"]
    for (model, _eps, method, r), seeds in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][2], str(kv[0][3]))):
        vals = [seeds[s] for s in sorted(seeds)]
        sd = st.stdev(vals) if len(vals) > 1 else float("nan")
        lines.append(f"| {model} | {method} | {r if r is not None else '-'} | {', '.join(f'{v:.4f}' for v in vals)} "
                     f"| {st.mean(vals):.4f} ± {sd:.4f} |")
    lines += ["", "| model | raptor (shared ratio) - dpsgd | per-seed differences | mean | paired se | verdict (|m| > 2 se) |",
              "|---|---|---|---|---|---|"]
    for (model, eps, method, r), seeds in sorted(cells.items(), key=lambda kv: (kv[0][0], str(kv[0][3]))):
        if method != "raptor":
            continue
        dp = next((v for k, v in cells.items() if k[0] == model and k[1] == eps and k[2] == "dpsgd"), None)
        if dp is None:
            continue
        common = sorted(set(seeds) & set(dp))
        d = [seeds[s] - dp[s] for s in common]
        m = st.mean(d)
        se = st.stdev(d) / len(d) ** 0.5 if len(d) > 1 else float("nan")
        verdict = "win" if m > 2 * se else "loss" if m < -2 * se else "tie"
        lines.append(f"| {model} | r {r} | {', '.join(f'{x:+.4f}' for x in d)} | {m:+.4f} | {se:.4f} | {verdict} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--base", default=None)
    p.add_argument("--cpt", default=None)
    p.add_argument("--summarize", nargs="+", default=None, metavar="JSONL",
                   help="instead: the markdown table of minilm_ablations.py result files (mean ± std over seeds, "
                        "raptor - dpsgd with a paired se)")
    p.add_argument("--data-dir", default=str(HERE.parent.parent / "shared" / "data" / "glue"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.summarize:
        print(summarize(args.summarize))
        return 0
    if args.cpt is None or args.out is None:
        p.error("--cpt and --out are required (or give --summarize)")
    torch.set_num_threads(args.threads)
    if args.base is None:
        from raptor.shipped import resolve

        args.base = str(resolve("minilm-moe"))
    base = load_file(str(Path(args.base) / "model.safetensors"))
    cpt = load_file(str(Path(args.cpt) / "model.safetensors"))
    layers = sorted({int(k.split(".")[2]) for k in base if ".mlp.experts." in k})
    weights: dict = {}
    for L in layers:
        wb, wc = expert_weights(base, L), expert_weights(cpt, L)
        rk = f"bert.layers.{L}.mlp.router.classifier.weight"
        weights[str(L)] = {
            "expert_spread_base": spread(wb),
            "expert_spread_cpt": spread(wc),
            "expert_drift_cpt": sum(float((c - b).norm() / b.norm()) for b, c in zip(wb, wc)) / len(wb),
            "router_drift_cpt": float((cpt[rk].float() - base[rk].float()).norm() / base[rk].float().norm()),
        }
    # attention drift, for scale (how far the rest of the model moved)
    att = [k for k in base if ".attention." in k and k.endswith("proj.weight")]
    weights["attention_drift_cpt"] = sum(float((cpt[k].float() - base[k].float()).norm() / base[k].float().norm())
                                         for k in att) / len(att)

    import transformers

    transformers.logging.set_verbosity_error()
    sys.path.insert(0, str(HERE))
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_grid_for_cpt", HERE / "run_grid.py")
    rg = importlib.util.module_from_spec(spec)
    sys.modules["run_grid_for_cpt"] = rg
    spec.loader.exec_module(rg)
    from raptor.moe.models import load_model
    from raptor.pretrain.routing import routing_statistics

    routing = {}
    keep = ("load_shares", "load_entropy_ratio", "mean_token_router_entropy", "owner_shares", "owner_entropy",
            "top1_token_mutual_information_corrected")
    for name, d in (("base", args.base), ("cpt", args.cpt)):
        recs = rg.records_of(str(Path(d).resolve()), "sst2", args.data_dir, 500, 500, 4000, 40)["public"]
        net = load_model(d, num_labels=2)
        with torch.no_grad():
            st = routing_statistics(net, recs["input_ids"], recs["attention_mask"])
        routing[name] = {L: {k: v for k, v in s.items() if k in keep} for L, s in st.items()}
    out = {"base": args.base, "cpt": args.cpt, "weights": weights, "routing_sst2_public": routing}
    Path(args.out).write_text(json.dumps(out, indent=1))
    for L in layers:
        w = weights[str(L)]
        rb, rc = routing["base"][str(L)], routing["cpt"][str(L)]
        print(f"layer {L}: spread {w['expert_spread_base']:.4f} -> {w['expert_spread_cpt']:.4f}, drift "
              f"{w['expert_drift_cpt']:.4f}, router drift {w['router_drift_cpt']:.4f}; SST-2 public load "
              f"{[round(x, 3) for x in rb['load_shares']]} H/logE {rb['load_entropy_ratio']:.3f} -> "
              f"{[round(x, 3) for x in rc['load_shares']]} H/logE {rc['load_entropy_ratio']:.3f}")
    print(f"attention drift {weights['attention_drift_cpt']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
