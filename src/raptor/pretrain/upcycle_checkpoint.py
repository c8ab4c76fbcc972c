"""Upcycling a checkpoint directory: ``raptor.upcycle`` / ``raptor upcycle``.

:func:`upcycle` reads a dense checkpoint (or the installed all-MiniLM-L6-v2), dispatches on its
``model_type``: BERT to :func:`raptor.pretrain.upcycle.upcycle_model` (``bert_moe``), Llama /
Mistral / Qwen2 to :func:`raptor.pretrain.upcycle_decoder.upcycle_decoder` (Mixtral /
Qwen2-MoE), and writes the MoE checkpoint with its tokenizer and ``upcycle.json``.

Privacy: the public texts for the k-means routers are the caller's declaration (rule 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from raptor.errors import ConfigError
from raptor.pretrain.upcycle import UpcycleSpec, read_dense, upcycle_model


def read_public_texts(path: Path, limit: int = 5000) -> list[str]:
    """Public texts for the k-means routers: one text per line of a ``.txt`` file, or the text
    column (``sentence``, ``text`` or ``sentence1``) of a ``.tsv`` / ``.csv`` / ``.jsonl`` table."""
    from raptor.data.textio import read_table, read_text_lines

    if path.suffix == ".txt":
        return list(read_text_lines(path))[:limit]
    table = read_table(path)
    column = next((c for c in ("sentence", "text", "sentence1") if c in table.columns), None)
    if column is None:
        raise ConfigError(f"--public-file {path}: no text column (sentence, text or sentence1) in its header "
                          f"{list(table.columns)}; or give a .txt file with one text per line")
    return [str(r[column]) for r in table.records if str(r[column]).strip()][:limit]


def upcycle(dense: str | Path, output_dir: str | Path, *, num_experts: int = 4, layers: str | Sequence[int] = "all",
            router: str = "kmeans", public_texts: Sequence[str] | None = None, seed: int = 0,
            max_length: int = 64, top_k: int = 2) -> dict:
    """Upcycle the dense checkpoint ``dense`` (a ``save_pretrained`` directory with its tokenizer, or
    ``"minilm"``: the installed all-MiniLM-L6-v2, hash-checked) into an MoE checkpoint in
    ``output_dir`` (a new or empty directory): config, weights, tokenizer and ``upcycle.json`` (the
    settings and each MoE layer's routing on the public texts). Returns that report.

    A BERT encoder becomes ``bert_moe`` (top-1); a Llama or Mistral decoder becomes Mixtral and a
    Qwen2 decoder Qwen2-MoE (top-``top_k`` with renormalised weights, exact as well:
    :mod:`raptor.pretrain.upcycle_decoder`).

    ``public_texts`` are PUBLIC texts (privacy rule 2: the caller declares them) for the k-means
    routers; ``router="random"`` needs none. Random draws (k-means++ seeding, random routers, the
    new head) come from a generator seeded with ``seed``.
    """
    import json

    from transformers import AutoTokenizer

    spec = UpcycleSpec(num_experts=num_experts, layers=layers if isinstance(layers, str) else tuple(layers),
                       router=router)
    out = Path(output_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--output-dir {out} exists and is not empty: choose a new directory")
    if dense == "minilm":
        from raptor.pretrain.minilm_source import dense_dir

        src = dense_dir()
    else:
        src = Path(dense)
    config, state = read_dense(src)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(src))
    except (OSError, ValueError) as err:
        raise ConfigError(f"{src}: no tokenizer files next to the weights ({err})") from None
    batches = []
    if public_texts:
        texts = list(public_texts)
        if tokenizer.pad_token is None:  # decoder tokenizers often have none: pad with EOS (masked anyway)
            tokenizer.pad_token = tokenizer.eos_token
        for i in range(0, len(texts), 32):
            enc = tokenizer(texts[i:i + 32], padding=True, truncation=True, max_length=max_length, return_tensors="pt")
            batches.append((enc["input_ids"], enc["attention_mask"]))
    generator = torch.Generator().manual_seed(seed)
    from raptor.pretrain.upcycle_decoder import UPCYCLE_TARGETS, upcycle_decoder

    if config.get("model_type") in UPCYCLE_TARGETS:  # Llama/Mistral -> Mixtral, Qwen2 -> Qwen2-MoE
        model, report = upcycle_decoder((config, state), num_experts=num_experts, top_k=top_k, layers=spec.layers,
                                        generator=generator, router=router, public_batches=batches,
                                        exclude_ids=tokenizer.all_special_ids, source=str(src))
    else:
        model, report = upcycle_model(config, state, spec, public_batches=batches, generator=generator,
                                      source=str(src), exclude_ids=tokenizer.all_special_ids)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    report.update(seed=seed, public_texts=len(public_texts or ()))
    (out / "upcycle.json").write_text(json.dumps(report, indent=1) + "\n")
    return report
