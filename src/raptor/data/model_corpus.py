"""A pre-trained model's declared public corpus, as records shaped like a task's data.

A model directory may carry ``public_corpus.txt`` (:func:`raptor.shipped.public_corpus`: the
shipped models carry held-out lines of their public pre-training text). Privacy rule 2 counts it as
declared public data: using it is the user's choice of that model, never a slice of their records.
:func:`model_public_corpus` reads it as :class:`ClassificationData` with the shape of the private
data (single texts, or consecutive lines paired for pair tasks), so that it can serve as a run's
public corpus: public routing (owners), owner shares and denominators n_hat, layer choice.

Labels: the corpus is unlabelled text. Its records carry PLACEHOLDER labels, ``i mod K`` (0.0
for regression), so that they fit the record layout. Routing, shares, n_hat and the layer choice
read only the text; a clip rule calibrated on public gradient norms (``--clip-rule`` other than
``uniform``) would see the gradients of these placeholder labels, an approximation at the start
of fine-tuning, where the head is near-uniform. Anything that needs true labels must not use it.
"""

from __future__ import annotations

from pathlib import Path

from raptor.data.dataset import ClassificationData
from raptor.data.textio import decode_utf8, read_bytes
from raptor.errors import DataError


def read_corpus_lines(path: str | Path) -> tuple[str, ...]:
    """The non-empty lines (stripped) of a UTF-8 text file."""
    path = Path(path)
    lines = tuple(s.strip() for s in decode_utf8(read_bytes(path), str(path)).splitlines() if s.strip())
    if not lines:
        raise DataError(f"{path}: the public corpus file has no text")
    return lines


def model_public_corpus(model: str | Path, like: ClassificationData) -> ClassificationData | None:
    """The declared public corpus of ``model`` (a shipped name or a model directory) as records
    shaped like ``like`` (the private data), or ``None`` when the model carries none."""
    from raptor.shipped import public_corpus

    path = public_corpus(model)
    if path is None:
        return None
    lines = read_corpus_lines(path)
    pairs = None
    if like.is_pair:
        if len(lines) < 2:
            raise DataError(f"{path}: a pair task needs at least two public lines")
        lines, pairs = lines[0:len(lines) - 1:2], lines[1::2]
    n = len(lines)
    source = f"public corpus of {model} ({path.name}, {n} records)"
    if like.is_regression:
        return ClassificationData(lines, (0.0,) * n, (), pairs, source=source, task_type="regression")
    k = len(like.label_names)
    return ClassificationData(lines, tuple(i % k for i in range(n)), like.label_names, pairs, source=source)
