"""raptor.data: GLUE task specs, three loaders, the public/private split, tokenizers and batching.

- :mod:`raptor.data.tasks`: :class:`TaskSpec` for sst2, mrpc, rte, cola, stsb, qnli, mnli, qqp, wnli.
- loaders returning :class:`DataSplits` of :class:`ClassificationData`:
  :func:`load_glue_dir` (official TSV layout), :func:`load_glue_cache` (local HF cache, offline) and
  :func:`load_glue_hub` (``datasets``, optional),
  :func:`load_user_files` (CSV / TSV / JSON Lines, ``run_glue.py`` style),
  :func:`load_bundled_sst2` (the sample shipped with the package).
- :func:`split_public_private` / :func:`separate_public`: the public corpus and the private records.
- :func:`train_wordpiece`, :func:`save_tokenizer`, :func:`load_tokenizer`.
- :func:`encode` + :func:`collate` (:mod:`raptor.data.batching`): ``input_ids [B,T]``, ``attention_mask [B,T]``, ``labels [B]``.
"""
from raptor._lazy import lazy_exports

#: exported name -> the module that defines it (imported on first use: PEP 562, see
#: :mod:`raptor._lazy`; no name may equal a submodule's name)
_EXPORTS: dict[str, str] = {
    "EncodedData": "raptor.data.batching",
    "collate": "raptor.data.batching",
    "encode": "raptor.data.batching",
    "encode_batch": "raptor.data.batching",
    "ClassificationData": "raptor.data.dataset",
    "DataSplits": "raptor.data.dataset",
    "load_glue_dir": "raptor.data.glue_local",
    "read_glue_tsv": "raptor.data.glue_local",
    "load_glue_cache": "raptor.data.hub",
    "load_glue_hub": "raptor.data.hub",
    "PublicPrivateSplit": "raptor.data.public",
    "public_indices": "raptor.data.public",
    "separate_public": "raptor.data.public",
    "split_public_private": "raptor.data.public",
    "load_bundled_sst2": "raptor.data.sample",
    "GLUE_TASKS": "raptor.data.tasks",
    "TaskSpec": "raptor.data.tasks",
    "get_task": "raptor.data.tasks",
    "SPECIAL_TOKENS": "raptor.data.tokenization",
    "check_tokenizer_matches_model": "raptor.data.tokenization",
    "load_tokenizer": "raptor.data.tokenization",
    "save_tokenizer": "raptor.data.tokenization",
    "train_wordpiece": "raptor.data.tokenization",
    "load_user_files": "raptor.data.user_files",
}

__all__ = [
    "GLUE_TASKS",
    "SPECIAL_TOKENS",
    "ClassificationData",
    "DataSplits",
    "EncodedData",
    "PublicPrivateSplit",
    "TaskSpec",
    "check_tokenizer_matches_model",
    "collate",
    "encode",
    "encode_batch",
    "get_task",
    "load_bundled_sst2",
    "load_glue_dir",
    "load_glue_cache",
    "load_glue_hub",
    "load_tokenizer",
    "load_user_files",
    "public_indices",
    "read_glue_tsv",
    "save_tokenizer",
    "separate_public",
    "split_public_private",
    "train_wordpiece",
]


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
