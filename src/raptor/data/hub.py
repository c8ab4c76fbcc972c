"""Loading a GLUE task through the ``datasets`` library: from the local Hugging Face cache
(:func:`load_glue_cache`, offline by construction) or from the hub (:func:`load_glue_hub`).

:func:`load_glue_cache` never touches the network, so it cannot hang: it finds the Arrow files
``datasets.load_dataset("nyu-mll/glue", task)`` leaves in the datasets cache,
``<cache>/nyu-mll___glue/<task>/<version>/<hash>/glue-<split>.arrow`` (or
``glue-<split>-NNNNN-of-NNNNN.arrow`` shards; the older script-based ``glue/<task>/...`` layout
too), and opens them with :meth:`datasets.Dataset.from_file`. The cache directory is
``cache_dir`` or the library's own default (``datasets.config.HF_DATASETS_CACHE``). A missing
copy is a :class:`DataError` that says where raptor looked and how to fill the cache or use a
local GLUE directory instead.

``datasets`` is an optional dependency (``pip install raptor-dp[hub]``) and is imported inside the
function, so raptor works without it. The hub's label ids are already in the order of
:attr:`TaskSpec.label_names`; the function checks the split's ``ClassLabel`` names against the
spec when the features carry them, and rejects unlabeled records (the hub's test splits use -1).
"""

from __future__ import annotations

import math
from pathlib import Path

from raptor.data.dataset import ClassificationData, DataSplits
from raptor.data.tasks import TaskSpec, get_task
from raptor.errors import DataError


def _split(dataset_dict, split: str, spec: TaskSpec) -> ClassificationData:
    where = f"hub glue/{spec.name}[{split}]"
    if split not in dataset_dict:
        raise DataError(f"{where}: no such split; the hub dataset has {sorted(dataset_dict)}")
    ds = dataset_dict[split]
    columns = list(ds.column_names)
    for column in (*spec.hub_text_columns, "label"):
        if column not in columns:
            raise DataError(f"{where}: missing column {column!r}; the dataset has {columns}")
    feature = (getattr(ds, "features", None) or {}).get("label")
    names = getattr(feature, "names", None)
    if names is not None and tuple(names) != spec.label_names:
        raise DataError(
            f"{where}: label names {list(names)} differ from raptor's spec {list(spec.label_names)}; "
            f"the hub dataset changed: load a local GLUE copy with load_glue_dir instead"
        )
    texts = tuple(str(t) for t in ds[spec.hub_text_columns[0]])
    pairs = tuple(str(t) for t in ds[spec.hub_text_columns[1]]) if spec.is_pair else None
    if spec.is_regression:
        scores = [float(y) for y in ds["label"]]
        bad = next((i for i, y in enumerate(scores) if not math.isfinite(y) or y < 0), None)
        if bad is not None:
            raise DataError(f"{where}: row {bad}: score {scores[bad]} is not a finite non-negative number (the hub "
                            f"marks unlabeled test rows with -1; use a labeled split)")
        return ClassificationData(texts, tuple(scores), (), pairs, source=where, task_type="regression")
    labels = [int(y) for y in ds["label"]]
    bad = next((i for i, y in enumerate(labels) if not 0 <= y < spec.num_labels), None)
    if bad is not None:
        raise DataError(
            f"{where}: row {bad}: label {labels[bad]} is not in range(0, {spec.num_labels}) "
            f"(the hub marks unlabeled test rows with -1; use a labeled split)"
        )
    return ClassificationData(texts, tuple(labels), spec.label_names, pairs, source=where)


def load_glue_hub(task: str | TaskSpec, *, cache_dir: str | None = None, revision: str | None = None) -> DataSplits:
    """Train and validation splits of a GLUE task from the Hugging Face hub.

    Needs the optional ``datasets`` package and network access to the hub (or a filled
    ``cache_dir``). Raises :class:`DataError` saying what to install or to use instead.
    """
    spec = get_task(task)
    try:
        import datasets
    except ImportError as err:
        raise DataError(
            "loading GLUE from the Hugging Face hub needs the `datasets` package: "
            "pip install raptor-dp[hub]  (or use a local GLUE directory / your own files)"
        ) from err
    try:
        dataset_dict = datasets.load_dataset("glue", spec.name, cache_dir=cache_dir, revision=revision)
    except (OSError, ConnectionError) as err:
        raise DataError(
            f"could not load glue/{spec.name} from the Hugging Face hub ({err}); check the network, or "
            f"download GLUE and use a local directory in the official TSV layout"
        ) from err
    return _splits(dataset_dict, spec)


def _splits(dataset_dict, spec: TaskSpec) -> DataSplits:
    """Train, the main validation split and (MNLI) the mismatched one when the dataset has it."""
    extra = tuple((name, _split(dataset_dict, hub, spec)) for name, _, hub in spec.extra_validation
                  if hub in dataset_dict)
    return DataSplits(
        train=_split(dataset_dict, "train", spec),
        validation=_split(dataset_dict, spec.hub_validation_split, spec),
        validation_name=spec.validation_name, extra_validation=extra, metrics=spec.metrics,
    )


#: folders of the hub's GLUE dataset in the datasets cache: the Parquet-era repo and the script-era name
CACHE_FOLDERS = ("nyu-mll___glue", "glue")


def _import_datasets():
    try:
        import datasets
    except ImportError as err:
        raise DataError(
            "reading GLUE from the Hugging Face cache needs the `datasets` package: pip install raptor-dp[hub] "
            "(or use --data-dir with a local GLUE directory in the official TSV layout)"
        ) from err
    return datasets


def cached_task_dir(task: str | TaskSpec, cache_dir: str | Path | None = None) -> Path:
    """The newest cached copy of ``task`` (the folder holding ``glue-train*.arrow``), or :class:`DataError`."""
    spec = get_task(task)
    root = Path(cache_dir if cache_dir is not None else _import_datasets().config.HF_DATASETS_CACHE).expanduser()
    found = [d for folder in CACHE_FOLDERS for d in (root / folder / spec.name).glob("*/*")
             if d.is_dir() and any(d.glob("glue-train*.arrow"))]
    if not found:
        raise DataError(
            f"no cached copy of glue/{spec.name} in the Hugging Face datasets cache {root} (looked for "
            f"{root}/{CACHE_FOLDERS[0]}/{spec.name}/<version>/<hash>/glue-train.arrow); raptor reads the cache "
            f"offline and never downloads. Pass --data-dir DIR (a GLUE directory in the official TSV layout), "
            f"or data.hf_cache=DIR if the cache lives elsewhere, or fill the cache once on a machine with network: "
            f"python -c \"import datasets; datasets.load_dataset('nyu-mll/glue', '{spec.name}')\""
        )
    return max(found, key=lambda d: d.stat().st_mtime)


def _cached_split(datasets, directory: Path, split: str):
    files = sorted(directory.glob(f"glue-{split}.arrow")) or sorted(directory.glob(f"glue-{split}-*-of-*.arrow"))
    if not files:
        return None
    parts = [datasets.Dataset.from_file(str(f)) for f in files]
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)


def load_glue_cache(task: str | TaskSpec, *, cache_dir: str | Path | None = None) -> DataSplits:
    """Train and validation split(s) of a GLUE task from the local Hugging Face datasets cache, offline.

    ``cache_dir``: the datasets cache (default: the library's, ``datasets.config.HF_DATASETS_CACHE``).
    """
    spec = get_task(task)
    datasets = _import_datasets()
    directory = cached_task_dir(spec, cache_dir)
    wanted = ("train", *(hub for _, _, hub in spec.validation_splits))
    dataset_dict = {s: ds for s in wanted if (ds := _cached_split(datasets, directory, s)) is not None}
    return _splits(dataset_dict, spec)
