"""Reading a declared public corpus file: the one reader behind ``raptor train`` (``--public-file``
and a model's public corpus, :func:`raptor.data.loaders.load_data`) and ``raptor demo``
(:func:`model_public_corpus`).

A model directory may carry its public corpus (:func:`raptor.shipped.public_corpus`: the shipped
models carry ``public_corpus.txt``, held-out lines of their public pre-training text). Privacy rule
2 counts it as declared public data: using it is the user's choice of that model, never a slice of
their records. :func:`read_public_corpus` reads any declared public file as
:class:`ClassificationData` shaped like the private data:

* ``.jsonl/.csv/.tsv``: the task's text and label columns (:func:`load_user_files`), labelled;
* ``.txt`` (:func:`raptor.data.public_source.is_labelled_corpus` is false): one unlabelled text per
  line. A sentence-pair task is refused (:class:`DataError`): single lines are not pairs.

Placeholder labels of an unlabelled corpus: every record gets label id 0 (0.0 for regression).
They exist only so that the public records fit the record layout that the public stage batches
(``labels [B]``, whose length counts the public records) and the resume fingerprint digests. No
label of a public record is read by anything that uses them: public routing (owners), owner shares,
denominators n_hat and the layer choice read ``input_ids`` and ``attention_mask`` only, and the one
consumer of public labels, the public per-expert clip rules (``privacy.clip_rule`` other than
``uniform``, which need public gradient norms), refuses an unlabelled corpus
(:func:`raptor.training.setup.public_stage.check_labelled`, through
:attr:`raptor.data.public_source.PublicSource.labelled`, which uses the same test of the file as
this reader). Private-safe: the placeholders are constants computed from nothing (not from private
records, not even from the public text), so they carry no information; what the run learns from
this corpus is its public text alone.
"""

from __future__ import annotations

from pathlib import Path

from raptor.data.dataset import ClassificationData
from raptor.data.public_source import PublicSource, is_labelled_corpus
from raptor.data.textio import read_text_lines
from raptor.data.user_files import load_user_files
from raptor.errors import DataError

#: the placeholder label of every record of an unlabelled public corpus (see the module docstring)
PLACEHOLDER_LABEL: int = 0


def read_public_corpus(path: str | Path, like: ClassificationData, *, text_columns=None, label_column: str = "label",
                       task: str | None = None, source: str | None = None) -> ClassificationData:
    """The declared public corpus file ``path`` as records shaped like ``like`` (the private data):
    a labelled table with the task's columns, or a ``.txt`` of unlabelled texts with placeholder
    labels (module docstring). ``source``: the records' description (default: the path)."""
    path = str(path)
    regression = like.is_regression
    if is_labelled_corpus(path):
        return load_user_files(path, text_columns=text_columns, label_column=label_column, task=task,
                               label_names=None if regression else like.label_names, task_type=like.task_type).train
    if like.is_pair:
        raise DataError(f"{path}: an unlabelled single-text public corpus cannot serve a sentence-pair task; "
                        "give --public-file with both text columns")
    texts = read_text_lines(path)
    n = len(texts)
    if regression:
        return ClassificationData(texts, (float(PLACEHOLDER_LABEL),) * n, (), source=source or path,
                                  task_type="regression")
    return ClassificationData(texts, (PLACEHOLDER_LABEL,) * n, like.label_names, source=source or path)


def model_public_corpus(model: str | Path, like: ClassificationData) -> tuple[ClassificationData, PublicSource] | None:
    """The declared public corpus of ``model`` (a shipped name or a model directory) as records
    shaped like ``like`` (the private data) with its :class:`PublicSource` (kind ``model-corpus``:
    pass it on as ``raptor.training.run.fine_tune.run_fine_tune(public_source=...)`` so that the run
    applies the rules of an unlabelled corpus), or ``None`` when the model carries none."""
    from raptor.shipped import public_corpus

    path = public_corpus(model)
    if path is None:
        return None
    data = read_public_corpus(path, like)
    data = data.subset(range(len(data)), source=f"public corpus of {model} ({path.name}, {len(data)} records)")
    return data, PublicSource("model-corpus", path=str(path))
