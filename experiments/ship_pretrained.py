"""Copy a ``raptor pretrain`` output directory into the package as a shipped model, and print its hashes.

    PYTHONPATH=src python experiments/ship_pretrained.py RUN_DIR [--name switch-public-tiny] \
        [--text ../shared/data/public_text]

writes ``src/raptor/data/pretrained/<name>/``:

* ``config.json``, ``model.safetensors`` (as saved: float16), ``tokenizer.json``,
  ``tokenizer_config.json``, ``pretrain.json``, ``routing.png``: copied from RUN_DIR (never the
  ``checkpoint/`` folder: optimizer state does not ship);
* ``public_corpus.txt``: the model's declared PUBLIC corpus, one text per line: held-out
  paragraphs of the pre-training files (the same ``split_held_out`` rule and ``held_out_every`` as
  the run, so the model never trained on them), ``--lines-per-file`` per file, evenly spaced by
  position, headings dropped, each cut to its first ``--max-words`` words;
* ``ATTRIBUTION.md``: source, licence and sha256 of every corpus file the model was trained on;
* ``SHA256SUMS``: the sha256 of every shipped file (``sha256sum -c`` format).

Refuses a run whose ``pretrain.json`` lists a file without a known shippable licence (IMDB is
research-use only: never shipped, nor anything trained on it), and a corpus file whose sha256
differs from the one the run recorded. Prints the weights' sha256 for the docs (README "Shipped
model"); ``tests/test_shipped.py`` checks that the README quotes the shipped file's hash.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from raptor._hashing import sha256_file  # noqa: E402
from raptor.pretrain.corpus import read_paragraphs, split_held_out  # noqa: E402
from raptor.shipped import PUBLIC_CORPUS_FILE, shipped_dir  # noqa: E402

COPIED = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "pretrain.json",
          "routing.png")

#: corpus file -> (what, licence, attribution); from ../shared/data/README.md. Only these may ship.
LICENCES: dict[str, tuple[str, str, str]] = {
    "wikitext-2.valid.txt": ("WikiText-2, validation part (tokenised Wikipedia)", "CC BY-SA 3.0",
                             "Merity, Xiong, Bradbury and Socher (2016), Pointer Sentinel Mixture Models; "
                             "text by Wikipedia contributors"),
    "wikitext-2.test.txt": ("WikiText-2, test part (tokenised Wikipedia)", "CC BY-SA 3.0",
                            "Merity, Xiong, Bradbury and Socher (2016), Pointer Sentinel Mixture Models; "
                            "text by Wikipedia contributors"),
    "tinystories.valid.txt": ("TinyStories, validation part", "CDLA-Sharing-1.0",
                              "Eldan and Li (2023), TinyStories: How Small Can Language Models Be and Still "
                              "Speak Coherent English?"),
    "wikipedia.sample.txt": ("858 English Wikipedia articles (2015 dump, WikiExtractor), each capped at ~10k "
                             "characters", "CC BY-SA 3.0", "Wikipedia contributors"),
    "gutenberg.sample.txt": ("24 Project Gutenberg books by 24 authors (header and footer removed)",
                             "public domain in the USA", "Project Gutenberg (www.gutenberg.org)"),
}


def check_shippable(report: dict) -> None:
    names = [f["name"] for f in report["files"]]
    bad = [n for n in names if n not in LICENCES]
    if bad:
        raise SystemExit(f"refusing to ship: the model was trained on {bad}, which have no shippable licence "
                         f"(only {sorted(LICENCES)}); pre-train with --exclude imdb")


def public_corpus_lines(report: dict, text_dir: Path, *, per_file: int, max_words: int) -> list[str]:
    """Held-out paragraphs of each training file (see the module docstring)."""
    every = report["config"]["held_out_every"]
    lines: list[str] = []
    for entry in report["files"]:
        path = text_dir / entry["name"]
        if sha256_file(path) != entry["sha256"]:
            raise SystemExit(f"{path}: sha256 differs from the one in pretrain.json; give the run's --text")
        (corpus,) = read_paragraphs([path])
        _, held = split_held_out(corpus.paragraphs, every=every)
        eligible = [p for p in held if not p.startswith("=") and len(p.split()) >= 8]
        if not eligible:
            raise SystemExit(f"{path}: no held-out paragraph of 8+ words")
        n = min(per_file, len(eligible))
        picked = [eligible[(i * len(eligible)) // n] for i in range(n)]
        lines.extend(" ".join(p.split()[:max_words]) for p in picked)
    return lines


def attribution(report: dict, name: str, corpus_lines: int) -> str:
    rows = "\n".join(f"| `{f['name']}` | {LICENCES[f['name']][0]} | {LICENCES[f['name']][1]} | "
                     f"{LICENCES[f['name']][2]} | `{f['sha256'][:16]}…` |" for f in report["files"])
    return f"""# {name}: attribution and licences

This model (weights, tokenizer) was pre-trained by `raptor pretrain` on the public English text
below and nothing else (no IMDB, no GLUE record, no private data). `public_corpus.txt` holds
{corpus_lines} held-out paragraphs of the same files (the model never trained on them), each cut to
its first words; it is the model's declared public corpus (routing statistics, public
denominators, layer choice). Those lines keep their source's licence (CC BY-SA 3.0 and
CDLA-Sharing-1.0 are share-alike: redistribute them under the same terms, with this
attribution).

| file | what | licence | attribution | sha256 |
|---|---|---|---|---|
{rows}

Licence texts: CC BY-SA 3.0 <https://creativecommons.org/licenses/by-sa/3.0/>,
CDLA-Sharing-1.0 <https://cdla.dev/sharing-1-0/>. The Gutenberg books are in the public domain in
the USA; check the laws of your country before using them elsewhere.
"""


def ship(run_dir: Path, name: str, text_dir: Path, *, per_file: int, max_words: int) -> Path:
    report = json.loads((run_dir / "pretrain.json").read_text())
    check_shippable(report)
    lines = public_corpus_lines(report, text_dir, per_file=per_file, max_words=max_words)
    target = shipped_dir() / name
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for fname in COPIED:
        if (run_dir / fname).is_file():
            shutil.copyfile(run_dir / fname, target / fname)
        elif fname != "routing.png":
            raise SystemExit(f"{run_dir / fname} is missing: is {run_dir} a finished raptor pretrain output?")
    (target / PUBLIC_CORPUS_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (target / "ATTRIBUTION.md").write_text(attribution(report, name, len(lines)), encoding="utf-8")
    files = sorted(p for p in target.iterdir() if p.name != "SHA256SUMS")
    (target / "SHA256SUMS").write_text("".join(f"{sha256_file(p)}  {p.name}\n" for p in files))
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="a finished raptor pretrain --output-dir")
    parser.add_argument("--name", default="switch-public-tiny", help="shipped name (default switch-public-tiny)")
    parser.add_argument("--text", type=Path, default=REPO.parent / "shared" / "data" / "public_text",
                        help="the run's public text directory (for public_corpus.txt)")
    parser.add_argument("--lines-per-file", type=int, default=100)
    parser.add_argument("--max-words", type=int, default=64)
    args = parser.parse_args()
    target = ship(args.run_dir, args.name, args.text, per_file=args.lines_per_file, max_words=args.max_words)
    total = sum(p.stat().st_size for p in target.iterdir())
    print(f"shipped {args.run_dir} as {args.name} in {target} ({total / 2**20:.2f} MiB)")
    print((target / "SHA256SUMS").read_text(), end="")
    print(f"model.safetensors sha256: {sha256_file(target / 'model.safetensors')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
