"""The SST-2 sample bundled inside the package, so that ``raptor demo`` runs without a GLUE copy.

``raptor/data/bundled/SST-2/`` holds, in the official GLUE TSV layout (gzip-compressed, header kept,
lines verbatim):

- ``train.tsv.gz``: 8,000 of the 67,349 GLUE SST-2 train rows: among the rows whose sentence has
  at least 6 whitespace-separated tokens, the first 8,000 of a PCG64(seed 0) permutation, kept in
  file order;
- ``dev.tsv.gz``: all 872 GLUE SST-2 dev rows.

Why 8,000 rows of 6+ tokens rather than 3,000 random rows: SST-2's train split is mostly short
phrases, and a model trained from scratch on 3,000 random rows stays near 0.69 dev accuracy (a
bag-of-words logistic regression reaches about 0.72 on them); 8,000 longer rows let the tiny
Switch model reach about 0.75 while the two files stay under 300 KB.

:func:`make_sst2_sample` rebuilds the files from a GLUE copy (``../shared/data/glue`` in this
project); a test checks that it reproduces the bundled text.
"""

from __future__ import annotations

import gzip
from importlib import resources
from pathlib import Path

import numpy as np

from raptor.data.dataset import DataSplits
from raptor.data.glue_local import load_glue_dir
from raptor.data.textio import decode_utf8, read_bytes

SAMPLE_TRAIN_ROWS = 8000
SAMPLE_MIN_TOKENS = 6
SAMPLE_SEED = 0


def bundled_dir() -> Path:
    """The folder of bundled data (``raptor/data/bundled``)."""
    return Path(str(resources.files("raptor.data") / "bundled"))


def load_bundled_sst2() -> DataSplits:
    """The bundled SST-2 sample: 8,000 train and 872 dev records (labels negative=0, positive=1)."""
    return load_glue_dir(bundled_dir(), "sst2")


def sample_lines(glue_dir: str | Path) -> tuple[str, str]:
    """The text of the sample's ``train.tsv`` and ``dev.tsv`` built from a GLUE copy (see module doc)."""
    root = Path(glue_dir) / "SST-2"
    train_text = decode_utf8(read_bytes(root / "train.tsv"), str(root / "train.tsv"))
    dev_text = decode_utf8(read_bytes(root / "dev.tsv"), str(root / "dev.tsv"))
    header, *rows = train_text.splitlines(keepends=True)
    eligible = [i for i, row in enumerate(rows) if len(row.split("\t")[0].split()) >= SAMPLE_MIN_TOKENS]
    generator = np.random.Generator(np.random.PCG64(SAMPLE_SEED))
    chosen = sorted(int(eligible[j]) for j in generator.permutation(len(eligible))[:SAMPLE_TRAIN_ROWS])
    return header + "".join(rows[i] for i in chosen), dev_text


def make_sst2_sample(glue_dir: str | Path, out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``<out_dir>/SST-2/{train,dev}.tsv.gz`` from the GLUE copy at ``glue_dir``."""
    train_text, dev_text = sample_lines(glue_dir)
    target = Path(out_dir) / "SST-2"
    target.mkdir(parents=True, exist_ok=True)
    paths = (target / "train.tsv.gz", target / "dev.tsv.gz")
    for path, text in zip(paths, (train_text, dev_text)):
        path.write_bytes(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0))
    return paths
