"""The settings of ``raptor train`` that are not fields of :class:`raptor.training.config.TrainConfig`:
where the records come from (``data``), which model (``model``) and how the command runs (``run``).

Each is a field with the same metadata as the config's (:func:`raptor.training.config.setting`):
a field with a ``flag`` is a first-class flag, the others are set by ``--set data.FIELD=VALUE``,
``--set model.FIELD=VALUE`` or ``--set run.FIELD=VALUE``. The parser and the namespace the
command reads are built from these classes by :mod:`raptor.cli.flags`; the field's name is the
namespace attribute (``args.hidden_size``).
"""

from __future__ import annotations

from dataclasses import dataclass

from raptor.data.model_source import DEFAULT_MODEL
from raptor.data.public_source import GLUE_PUBLIC_FRACTION
from raptor.data.user_files import TASK_TYPES
from raptor.training.config import setting
from raptor.training.names import METRICS


@dataclass(frozen=True)
class DataSettings:
    """Private, public and dev records (``--set data.FIELD=VALUE``)."""

    task: str | None = setting(None, flag="--task", section="data",
                               help="GLUE task: sst2, mrpc, rte, cola, stsb, wnli, qnli, qqp, mnli; read from "
                                    "--data-dir, or without it from the local Hugging Face datasets cache (offline)",
                               default_text="none")
    data_dir: str | None = setting(None, flag="--data-dir", section="data",
                                   help="GLUE directory in the official TSV layout", default_text="none")
    hf_cache: str | None = setting(None, help="datasets cache for --task without --data-dir",
                                   default_text="the datasets library's")
    task_type: str = setting("auto", choices=TASK_TYPES,
                             help="--train-file labels: classification, or regression (float scores, one-output head, "
                                  "MSE); auto: regression when every label is a number and some is fractional or "
                                  "there are >20 values")
    train_file: str | None = setting(None, flag="--train-file", section="data",
                                     help="CSV/TSV/JSONL training file (private)", default_text="the bundled SST-2 sample")
    validation_file: str | None = setting(None, flag="--validation-file", section="data",
                                          help="CSV/TSV/JSONL validation file", default_text="none")
    text_column: tuple[str, ...] | None = setting(
        None, flag="--text-column", section="data", nargs="+", help="one text column, or two for pairs",
        default_text="sentence1 sentence2, else sentence, else text")
    label_column: str = setting("label", flag="--label-column", section="data", help="label column of --train-file")
    public_file: str | None = setting(
        None, flag="--public-file", section="data",
        help="a public corpus (CSV/TSV/JSONL with the task's columns) you may use without privacy",
        default_text="none; a --model directory may ship one")
    public_size: float | None = setting(
        None, flag="--public-size", section="data",
        help="designate a slice of the training data as public on purpose: a count, or a fraction < 1; those "
             "records lose DP protection",
        default_text=f"none for --train-file; GLUE tasks and the bundled sample: the benchmark convention, "
                     f"{GLUE_PUBLIC_FRACTION:g} of the training split")
    max_train_samples: int | None = setting(None, help="use the first N private records", default_text="all")
    max_eval_samples: int | None = setting(None, help="evaluate on the first N dev records", default_text="all")
    prompt_field: str = setting("prompt", help="JSONL prompt field (text decoders, run.objective=generate)")
    answer_field: str = setting("answer", help="JSONL answer field (run.objective=generate)")
    image_field: str = setting("image", help="JSONL image-path field (DeepSeek-VL2)")
    question_field: str = setting("question", help="JSONL question field (DeepSeek-VL2)")


@dataclass(frozen=True)
class ModelSettings:
    """The model, its tokenizer and its output head (``--set model.FIELD=VALUE``)."""

    model: str = setting(DEFAULT_MODEL, flag="--model", section="model",
                         help="tiny family name (random init), local save_pretrained dir, shipped model or hub name")
    tokenizer: str | None = setting(None, help="tokenizer dir/file",
                                    default_text="the model's, or WordPiece trained on the public corpus")
    vocab_size: int = setting(8000, help="WordPiece vocabulary size (tiny families)")
    hidden_size: int = setting(64, help="tiny families: d_model")
    num_layers: int = setting(2, help="tiny families: layers")
    num_experts: int = setting(4, help="tiny families: experts per layer")
    head_init: str | None = setting(
        None, choices=("random", "label-words"),
        help="classification head: random, or label-word embeddings x 0.02 (for pretrained models; words from "
             "model.label_words or the GLUE task)", default_text="random; label-words under --recipe")
    label_words: tuple[str, ...] | None = setting(None, help="one word per label id, for model.head_init=label-words",
                                                  default_text="the task's")


@dataclass(frozen=True)
class RunSettings:
    """How the command runs: objective, metrics, checkpoints, output, processes (``--set run.FIELD=VALUE``)."""

    objective: str = setting("classify", flag="--objective", section="method", choices=("classify", "generate"),
                             help="classify, or generate: answer-only fine-tuning of a decoder on JSONL prompt/answer "
                                  "(or image/question/answer for DeepSeek-VL2), scored by exact match")
    metric: tuple[str, ...] | None = setting(
        None, choices=METRICS, help="dev metrics, the first is the main one",
        default_text="the task's; accuracy for a classification --train-file, pearson and spearman for regression")
    checkpoint_every: int = setting(0, help="checkpoint every N steps; a checkpoint is always written before the "
                                            "first and after the last step (0: only those)")
    max_new_tokens: int = setting(8, help="greedy decoding length (run.objective=generate)")
    freeze_shared_experts: bool = setting(False, help="keep the MoE shared experts frozen (the reference's VL2 "
                                                      "setting) instead of training them in the shared group")
    overwrite: bool = setting(False, flag="--overwrite", section="run", action="store_true",
                              help="replace a run already in --output-dir", default_text="off")
    resume: str | None = setting(None, flag="--resume", section="run",
                                 help="OUTPUT_DIR/checkpoint of a run to continue (same settings and data)",
                                 default_text="none")
    no_progress: bool = setting(False, flag="--no-progress", section="run", action="store_true",
                                help="no progress bars, transformers' loading/writing bars included",
                                default_text="shown")
    distributed: bool = setting(False, help="data-parallel DP under torchrun, one process per rank (see README)")
    dist_backend: str | None = setting(None, choices=("gloo", "nccl"), help="process-group backend",
                                       default_text="nccl with --device cuda, else gloo")
    dist_timeout: float = setting(300.0, help="seconds a collective may wait for another rank before the job stops "
                                              "(must exceed rank 0's public stage, which the other ranks wait for)")


#: ``--set`` prefix -> the settings class it reaches (the config's own fields take no prefix)
SETTINGS: dict[str, type] = {"data": DataSettings, "model": ModelSettings, "run": RunSettings}
