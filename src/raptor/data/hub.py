"""Loading a GLUE task from the Hugging Face hub with ``datasets.load_dataset("glue", task)``.

``datasets`` is an optional dependency (``pip install raptor-dp[hub]``) and is imported inside the
function, so raptor works without it. The hub's label ids are already in the order of
:attr:`TaskSpec.label_names`; the function checks the split's ``ClassLabel`` names against the
spec when the features carry them, and rejects unlabeled records (the hub's test splits use -1).
"""

from __future__ import annotations

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
    labels = [int(y) for y in ds["label"]]
    bad = next((i for i, y in enumerate(labels) if not 0 <= y < spec.num_labels), None)
    if bad is not None:
        raise DataError(
            f"{where}: row {bad}: label {labels[bad]} is not in range(0, {spec.num_labels}) "
            f"(the hub marks unlabeled test rows with -1; use a labeled split)"
        )
    texts = tuple(str(t) for t in ds[spec.hub_text_columns[0]])
    pairs = tuple(str(t) for t in ds[spec.hub_text_columns[1]]) if spec.is_pair else None
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
    return DataSplits(
        train=_split(dataset_dict, "train", spec),
        validation=_split(dataset_dict, spec.hub_validation_split, spec),
    )
