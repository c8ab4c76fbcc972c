"""Where a run's public data comes from: only what the user declared public, never a silent default.

Sources, in the order they are taken (:func:`resolve_public_source`):

1. ``file``: ``--public-file FILE`` (library: ``public=`` records), text the user may use without
   privacy;
2. ``slice``: ``--public-size K`` given on purpose (library: ``public_size=``): K records (or a
   fraction) of the training split are moved to the public side and lose DP protection;
3. ``model-corpus``: the public corpus that comes with a shipped or pre-trained model: a file
   named one of :data:`MODEL_PUBLIC_FILES` inside its ``save_pretrained`` directory (the hook for
   shipped models: a model pre-trained on public text ships that text, or a sample of it). A
   ``public.jsonl/.csv/.tsv`` has the task's text and label columns; ``public.txt`` is one
   unlabelled text per line (routing statistics, layer choice and owner shares need no labels; the
   public clip-norm rules do, so they refuse it);
4. ``glue-convention``: a GLUE benchmark (``--task``) or the bundled SST-2 sample: the documented
   benchmark convention, :data:`GLUE_PUBLIC_FRACTION` of the benchmark's TRAINING split is
   designated public (README, "Public data");
5. ``training-data``: ``--method nonprivate`` with none of the above: the run makes no privacy
   claim, so its own training data gives the routing statistics (and a tiny family's tokenizer);
6. ``none``: a DP run whose method computes nothing from public data (no automatic layer choice,
   no public denominators or clip norms, a tokenizer that comes with the model): no public corpus.

A user's own training data with none of 1-3, under a DP method that needs public statistics, is
a :class:`ConfigError` naming the flags. results.json records the source (``to_dict``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from raptor.errors import ConfigError
from raptor.shipped import PUBLIC_CORPUS_FILES as MODEL_PUBLIC_FILES  # one list of names, in raptor.shipped

#: the GLUE benchmark convention: this fraction of the benchmark's training split is public
GLUE_PUBLIC_FRACTION: float = 0.05
KINDS: tuple[str, ...] = ("file", "slice", "model-corpus", "glue-convention", "training-data", "none")


@dataclass(frozen=True)
class PublicSource:
    """A declared public source: ``kind`` (one of :data:`KINDS`), ``path`` for files, ``size`` for slices."""

    kind: str
    path: str | None = None
    size: int | float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"public source kind must be one of {KINDS}, got {self.kind!r}")

    @property
    def labelled(self) -> bool:
        """Whether the public records carry labels (a ``public.txt`` corpus does not)."""
        return self.path is None or is_labelled_corpus(self.path)

    def describe(self) -> str:
        return {"file": f"public file {self.path}", "slice": f"--public-size {self.size} slice of the training data",
                "model-corpus": f"the model's public corpus {self.path}",
                "glue-convention": f"GLUE convention: {self.size} of the benchmark's training split",
                "training-data": "the training data itself (non-private run)",
                "none": "none (this method computes nothing from public data)"}[self.kind]

    def to_dict(self) -> dict:
        return {"kind": self.kind, "path": self.path, "size": self.size, "description": self.describe()}


def is_labelled_corpus(path: str | Path) -> bool:
    """Whether a public corpus file carries labels: a table with the task's columns does, a ``.txt``
    (one text per line) does not. The one test used by :attr:`PublicSource.labelled` and by the
    reader, :func:`raptor.data.model_corpus.read_public_corpus`."""
    return not str(path).endswith(".txt")


def model_public_corpus(model: str | None) -> Path | None:
    """The public corpus shipped with model ``model`` (a directory or a shipped model's short name), or None."""
    if not model:
        return None
    from raptor.shipped import public_corpus

    return public_corpus(model)


def check_size(public_size: float) -> int | float:
    """``--public-size`` as an int count (>= 1) or a float fraction in (0, 1)."""
    if isinstance(public_size, bool) or not isinstance(public_size, (int, float)) or not public_size > 0:
        raise ConfigError(f"--public-size must be a positive count or a fraction in (0, 1), got {public_size!r}")
    if public_size >= 1 and float(public_size) != int(public_size):
        raise ConfigError(f"--public-size {public_size}: a count must be a whole number (or give a fraction < 1)")
    return int(public_size) if public_size >= 1 else float(public_size)


def resolve_public_source(*, public_file: str | None = None, public_size: float | None = None,
                          model: str | None = None, user_data: bool, nonprivate: bool = False,
                          needs: Sequence[str] = ("public routing statistics",)) -> PublicSource:
    """The declared public source (see the module docstring), or :class:`ConfigError`.

    ``user_data``: the training data is the user's (a file or records), not a GLUE benchmark or the
    bundled sample. ``needs``: what the run computes from public data (empty: nothing).
    """
    if public_file is not None and public_size is not None:
        raise ConfigError("give either --public-file or --public-size, not both")
    if public_file is not None:
        return PublicSource("file", path=str(public_file))
    if public_size is not None:
        return PublicSource("slice", size=check_size(public_size))
    shipped = model_public_corpus(model)
    if shipped is not None:
        return PublicSource("model-corpus", path=str(shipped))
    if not user_data:
        return PublicSource("glue-convention", size=GLUE_PUBLIC_FRACTION)
    if nonprivate:
        return PublicSource("training-data")
    if not needs:
        return PublicSource("none")
    from raptor.shipped import SHIPPED, shadowed

    if model is not None and shadowed(model) is not None:
        kind = "shipped" if model in SHIPPED else "built"
        real = (f"--model {model} is the local directory ./{model} here, which ships none and shadows the {kind} "
                f"model {model} (which ships one): rename ./{model} or run from another directory")
    else:
        real = "--model minilm-moe, the real pretrained model, ships one with its tokenizer"
    raise ConfigError(
        f"no public data declared, and this run needs it for {', '.join(needs)}. raptor never makes private "
        "records public by default. Give --public-file FILE (text you may use without privacy), a --model "
        f"directory that ships a public corpus ({' or '.join(MODEL_PUBLIC_FILES)}; {real}), or --public-size K to "
        "designate K records (or a fraction < 1) of the training data as public (they lose DP protection)"
    )
