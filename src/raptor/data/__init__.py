"""raptor.data: GLUE task specs, three loaders, the public/private split, tokenizers and batching.

- :mod:`raptor.data.tasks`: :class:`TaskSpec` for sst2, mrpc, rte, cola, stsb, qnli, mnli, qqp, wnli.
- loaders returning :class:`DataSplits` of :class:`ClassificationData`:
  :func:`load_glue_dir` (official TSV layout), :func:`load_glue_cache` (local HF cache, offline) and
  :func:`load_glue_hub` (``datasets``, optional),
  :func:`load_user_files` (CSV / TSV / JSON Lines, ``run_glue.py`` style),
  :func:`load_bundled_sst2` (the sample shipped with the package).
- :func:`split_public_private` / :func:`separate_public`: the public corpus and the private records.
- :func:`train_wordpiece`, :func:`save_tokenizer`, :func:`load_tokenizer`.
- :func:`encode` + :func:`collate`: ``input_ids [B,T]``, ``attention_mask [B,T]``, ``labels [B]``.
"""

from raptor.data.collate import EncodedData, collate, encode, encode_batch
from raptor.data.dataset import ClassificationData, DataSplits
from raptor.data.glue_local import load_glue_dir, read_glue_tsv
from raptor.data.hub import load_glue_cache, load_glue_hub
from raptor.data.public import PublicPrivateSplit, public_indices, separate_public, split_public_private
from raptor.data.sample import load_bundled_sst2
from raptor.data.tasks import GLUE_TASKS, TaskSpec, get_task
from raptor.data.tokenization import (
    SPECIAL_TOKENS,
    check_tokenizer_matches_model,
    load_tokenizer,
    save_tokenizer,
    train_wordpiece,
)
from raptor.data.user_files import load_user_files

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
