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


#: the fewest public tokens per expert the k-means routers are fitted on (fewer give centroids of a
#: handful of tokens each: routing by accident, not by what a token is)
MIN_TOKENS_PER_EXPERT = 32
#: ``--top-k`` of a decoder upcycling when none is given
DEFAULT_TOP_K = 2


def check_top_k(model_type, top_k: int | None, num_experts: int) -> int:
    """The top-k of an upcycling into ``model_type``'s MoE: a BERT (``bert_moe``) is top-1 and takes
    no ``--top-k``; a decoder's is at most ``--experts`` (default :data:`DEFAULT_TOP_K`)."""
    from raptor.pretrain.upcycle_decoder import UPCYCLE_TARGETS

    if model_type not in UPCYCLE_TARGETS:
        if top_k is not None and top_k != 1:
            raise ConfigError(f"--top-k {top_k}: a {model_type or 'bert'} checkpoint upcycles into bert_moe, which "
                              "routes every token to one expert (top-1) and has no top-k to set; leave --top-k out "
                              "(--top-k applies to Llama, Mistral and Qwen2 decoders)")
        return 1
    k = DEFAULT_TOP_K if top_k is None else top_k
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"--top-k must be an integer >= 1, got {k!r}")
    if k > num_experts:
        raise ConfigError(f"--top-k {k} exceeds --experts {num_experts}: a token cannot go to more experts than a "
                          f"block has; give --top-k {num_experts} or less, or more --experts")
    return k


def count_public_tokens(batches, exclude_ids: Sequence[int]) -> int:
    """The real tokens of the tokenized public batches (mask 1, not a special token): what k-means fits."""
    excluded = sorted(set(exclude_ids))
    return sum(int((mask.bool() & ~torch.isin(ids, torch.tensor(excluded, dtype=torch.long, device=ids.device))).sum())
               for ids, mask in batches)


def _lock(out: Path):
    """(descriptor, lock path, whether the lock made the directory) of ``out``'s output lock
    (``.raptor.lock``, as ``raptor train`` takes): one writer per directory; ConfigError if another
    live process holds it. ``(None, None, False)`` without ``fcntl``."""
    from raptor._flock import fcntl, lock_file, read_holder, write_holder

    if fcntl is None:
        return None, None, False
    created = not out.exists()
    lock = out / ".raptor.lock"
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = lock_file(lock)
    except OSError as err:
        raise ConfigError(f"--output-dir {out}: cannot be used as an output directory ({err.strerror or err}); "
                          "choose another --output-dir") from None
    if fd is None:
        info = read_holder(lock)
        holder = f"pid {info['pid']} on {info.get('host', '?')}" if "pid" in info else "pid unknown"
        raise ConfigError(f"--output-dir {out}: another raptor run ({holder}) is writing there now; wait for it to "
                          "end, or choose another --output-dir")
    write_holder(fd, command="raptor upcycle")
    return fd, lock, created


def upcycle(dense: str | Path, output_dir: str | Path, *, num_experts: int = 4, layers: str | Sequence[int] = "all",
            router: str = "kmeans", public_texts: Sequence[str] | None = None, seed: int = 0,
            max_length: int = 64, top_k: int | None = None) -> dict:
    """Upcycle the dense checkpoint ``dense`` (a ``save_pretrained`` directory with its tokenizer, or
    ``"minilm"``: the installed all-MiniLM-L6-v2, hash-checked) into an MoE checkpoint in
    ``output_dir`` (a new or empty directory): config, weights, tokenizer and ``upcycle.json`` (the
    settings and each MoE layer's routing on the public texts). Returns that report.

    A BERT encoder becomes ``bert_moe`` (top-1); a Llama or Mistral decoder becomes Mixtral and a
    Qwen2 decoder Qwen2-MoE (top-``top_k`` with renormalised weights, exact as well:
    :mod:`raptor.pretrain.upcycle_decoder`).

    ``public_texts`` are PUBLIC texts (privacy rule 2: the caller declares them) for the k-means
    routers, at least :data:`MIN_TOKENS_PER_EXPERT` real tokens per expert; ``router="random"``
    needs none. Random draws (k-means++ seeding, random routers, the new head) come from a
    generator seeded with ``seed``. ``top_k``: decoders only, at most ``num_experts`` (default 2).

    The output directory is locked while it is written (``.raptor.lock``, as ``raptor train``
    takes): a second upcycling into it at the same time is refused.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ConfigError(f"--seed must be an integer in [0, 2**63), got {seed!r}")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2:
        raise ConfigError(f"max_length must be an integer >= 2 (a special token and a real one), got {max_length!r}")
    if not isinstance(layers, str) and not tuple(layers):
        raise ConfigError("--moe-layers is empty: give all, every-other or block indices such as 0,2,5")
    spec = UpcycleSpec(num_experts=num_experts, layers=layers if isinstance(layers, str) else tuple(layers),
                       router=router)
    out = Path(output_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--output-dir {out}: is an existing file; give a new directory path")
    fd, lock, created = _lock(out)
    try:
        return _upcycle(dense, out, spec, public_texts=public_texts, seed=seed, max_length=max_length, top_k=top_k)
    except BaseException:
        if created and lock is not None:  # nothing of this run stays behind in a directory it made
            import shutil

            lock.unlink(missing_ok=True)
            if not any(out.iterdir()):
                out.rmdir()
            elif not (out / "upcycle.json").is_file():
                shutil.rmtree(out, ignore_errors=True)
        raise
    finally:
        if fd is not None:
            from raptor._flock import unlock_and_remove

            unlock_and_remove(lock, fd)


def _upcycle(dense, out: Path, spec: UpcycleSpec, *, public_texts, seed: int, max_length: int,
             top_k: int | None) -> dict:
    import json

    from transformers import AutoTokenizer

    num_experts, router = spec.num_experts, spec.router
    if any(p.name != ".raptor.lock" for p in out.iterdir()):
        raise ConfigError(f"--output-dir {out} exists and is not empty: choose a new directory")
    if dense == "minilm":
        from raptor.pretrain.minilm_source import dense_dir

        src = dense_dir()
    else:
        src = Path(dense)
    if (src / "config.json").is_file():  # --top-k against the family, before the weights are read
        try:
            model_type = json.loads((src / "config.json").read_text()).get("model_type")
        except (OSError, ValueError, AttributeError):
            model_type = None
        top_k = check_top_k(model_type, top_k, num_experts)
    config, state = read_dense(src)
    top_k = check_top_k(config.get("model_type"), top_k, num_experts)
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
    if router == "kmeans" and batches:
        tokens = count_public_tokens(batches, tokenizer.all_special_ids)
        if tokens < MIN_TOKENS_PER_EXPERT * num_experts:
            raise ConfigError(f"--router kmeans: the public text gives {tokens} tokens (special tokens left out), "
                              f"fewer than {MIN_TOKENS_PER_EXPERT} per expert for --experts {num_experts} "
                              f"({MIN_TOKENS_PER_EXPERT * num_experts}); give more public text (--public-file), fewer "
                              "--experts, or --router random")
    generator = torch.Generator().manual_seed(seed)
    from raptor.pretrain.upcycle_decoder import UPCYCLE_TARGETS, upcycle_decoder

    if config.get("model_type") in UPCYCLE_TARGETS:  # Llama/Mistral -> Mixtral, Qwen2 -> Qwen2-MoE
        model, report = upcycle_decoder((config, state), num_experts=num_experts, top_k=top_k, layers=spec.layers,
                                        generator=generator, router=router, public_batches=batches,
                                        exclude_ids=tokenizer.all_special_ids, source=str(src))
    else:
        model, report = upcycle_model(config, state, spec, public_batches=batches, generator=generator,
                                      source=str(src), exclude_ids=tokenizer.all_special_ids)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    report.update(seed=seed, public_texts=len(public_texts or ()))
    (out / "upcycle.json").write_text(json.dumps(report, indent=1) + "\n")
    return report
