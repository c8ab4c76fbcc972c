"""Pre-train a small MoE non-privately on PUBLIC text: the warm start for DP fine-tuning.

Masked-token prediction for Switch, causal LM for the decoder families (OLMoE, Mixtral, Qwen2/3-MoE,
DeepSeek-V2/V3). The tokenizer is WordPiece trained on the same public text (or ``--tokenizer``).
Load-balancing and z-losses are on (the text is public, so coupling records costs nothing); router
jitter and dropout are off. Writes a ``save_pretrained`` directory + tokenizer, ``pretrain.json``
(loss curve, held-out loss, wall time, tokens/s, routing before/after) and ``routing.png``; a
checkpoint every ``--checkpoint-every`` steps, continued with ``--resume``.

Privacy: only the files given with ``--text`` are read (``--glue-dir`` adds, for the routing report
only, the public slice of each GLUE task's training split). Give public text only: a file of private
records passed here would be trained on without any protection.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from raptor.errors import ConfigError
from raptor.pretrain.names import DEFAULT_GLUE_TASKS

if TYPE_CHECKING:  # imported where used: ``raptor pretrain --help`` imports no torch
    from raptor.pretrain.run import PretrainConfig

#: flag -> (type, default, help) for the PretrainConfig fields exposed as plain flags
_FLAGS = {
    "vocab_size": (int, 8192, "WordPiece vocabulary size when training the tokenizer"),
    "hidden_size": (int, 128, "d_model"),
    "num_layers": (int, 4, "transformer layers (every one is an MoE layer)"),
    "num_heads": (int, 4, "attention heads"),
    "num_experts": (int, 8, "experts per MoE layer"),
    "top_k": (int, 2, "experts per token for top-k families (Switch is always top-1)"),
    "expert_intermediate": (int, 256, "hidden width of each expert"),
    "block_length": (int, 128, "tokens per training block"),
    "batch_size": (int, 32, "blocks per step"),
    "steps": (int, 2000, "optimizer steps"),
    "lr": (float, 1e-3, "peak AdamW learning rate"),
    "weight_decay": (float, 0.01, "AdamW weight decay"),
    "warmup_steps": (int, 100, "linear warm-up steps (then cosine decay)"),
    "min_lr_ratio": (float, 0.1, "final lr as a fraction of --lr"),
    "mask_prob": (float, 0.15, "masked-token rate (Switch)"),
    "aux_loss_coef": (float, 0.01, "load-balancing loss weight (public pre-training only)"),
    "z_loss_coef": (float, 0.001, "router z-loss weight (public pre-training only)"),
    "held_out_every": (int, 50, "hold out one group of 20 paragraphs in every N"),
    "eval_every": (int, 250, "held-out evaluation every N steps"),
    "eval_blocks": (int, 256, "held-out blocks evaluated"),
    "checkpoint_every": (int, 200, "checkpoint every N steps"),
    "glue_public_size": (float, 0.05, "public slice of each GLUE training split (as raptor train --public-size)"),
    "stats_records": (int, 512, "records per corpus for the routing statistics"),
    "seed": (int, 0, "seed of the weights, data order and masks"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--text", nargs="+", required=True, metavar="FILE_OR_DIR",
                        help="public text files or directories of *.txt (e.g. ../shared/data/public_text)")
    parser.add_argument("--include", nargs="*", default=[], help="keep only files whose name contains one of these")
    parser.add_argument("--exclude", nargs="*", default=[], help="drop files whose name contains one of these (e.g. imdb)")
    parser.add_argument("--family", default="switch_transformers", help="model family (default switch_transformers)")
    parser.add_argument("--tokenizer", default=None, help="use this tokenizer instead of training one")
    parser.add_argument("--init-from", default=None, metavar="MODEL",
                        help="continued pre-training: start from this checkpoint (a directory or a shipped/built "
                             "name such as minilm-moe); its family, sizes and tokenizer are used")
    parser.add_argument("--output-dir", required=True, help="where the model, tokenizer and pretrain.json go")
    parser.add_argument("--resume", action="store_true", help="continue the run in --output-dir from its checkpoint")
    parser.add_argument("--glue-dir", default=None,
                        help="GLUE TSV root: adds routing statistics on each task's public slice")
    parser.add_argument("--glue-tasks", nargs="*", default=list(DEFAULT_GLUE_TASKS))
    parser.add_argument("--save-dtype", choices=("float16", "float32"), default="float16",
                        help="storage dtype of the saved weights (loaded back as float32)")
    for name, (kind, default, help_text) in _FLAGS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None if name == "top_k" else default,
                            help=f"{help_text} (default {default})")  # --top-k: None tells "not given" apart
    parser.add_argument("--device", default="cpu", help="where the model trains: cpu (default) or cuda[:N]")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="compute precision (bfloat16: autocast; weights and checkpoints stay float32)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (performance only; default: torch's choice)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def config_from_args(args: argparse.Namespace) -> PretrainConfig:
    from raptor.pretrain.run import PretrainConfig

    return PretrainConfig(
        output_dir=args.output_dir, text=tuple(args.text), family=args.family, include=tuple(args.include),
        exclude=tuple(args.exclude), tokenizer=args.tokenizer, glue_dir=args.glue_dir,
        glue_tasks=tuple(args.glue_tasks), save_dtype=args.save_dtype, dtype=args.dtype, init_from=args.init_from,
        **{name: getattr(args, name) for name in _FLAGS if name != "top_k"},
        top_k=_FLAGS["top_k"][1] if args.top_k is None else args.top_k,
    )


#: the size flags that ``--init-from`` takes from its checkpoint
_SIZES = ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_experts", "expert_intermediate")


def check_top_k(args: argparse.Namespace, config: PretrainConfig) -> None:
    """An explicit ``--top-k`` is refused where the family routes top-1 (it has no top-k to set); with
    ``--init-from``, a size flag or a ``--family`` other than the checkpoint's is refused (the
    checkpoint's are used)."""
    from raptor.pretrain.lm import routes_top1

    if args.init_from is not None:
        given = [f"--{n.replace('_', '-')} {getattr(args, n)}" for n in _SIZES if getattr(args, n) != _FLAGS[n][1]]
        if given:
            raise ConfigError(f"{', '.join(given)}: --init-from {args.init_from} continues that checkpoint, whose sizes "
                              "are its own (its config.json); leave the size flags out")
        if args.family != "switch_transformers" and args.family != config.family:
            raise ConfigError(f"--family {args.family}: --init-from {args.init_from} is a {config.family} checkpoint, "
                              "and continued pre-training keeps its family; leave --family out")

    if args.top_k is not None and routes_top1(config.family):
        given = f"--init-from {args.init_from}'s family" if args.init_from else f"--family {config.family}"
        raise ConfigError(f"--top-k {args.top_k}: {given} ({config.family}) routes every token to one expert (top-1) "
                          "and has no top-k to set; leave --top-k out, or choose a top-k family (olmoe, mixtral, "
                          "qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3)")


def _device(name: str) -> str:
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as err:
        raise ConfigError(f"--device {name!r} is not a torch device ({err}); use cpu or cuda") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {name}: CUDA is not available on this machine; use --device cpu")
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"--device {name}: pre-training supports cpu and cuda")
    return str(device)


def run(args: argparse.Namespace) -> int:
    import torch

    from raptor.cli.flag_checks import check_pretrain_args
    from raptor.cli.run_lock import claim_output_dir
    from raptor.cli.run_output import quiet_transformers
    from raptor.pretrain.run import pretrain
    from raptor.training.run.preflight import check_output_dir

    if str(args.output_dir).strip() == "":
        raise ConfigError("--output-dir is empty; give a directory path")
    check_output_dir(args.output_dir, overwrite=True, resume=True)  # a usable path first
    check_pretrain_args(args)  # bounds, --text, --tokenizer
    config = config_from_args(args)  # the family (--init-from's), the sizes, --top-k: before any output is made
    check_top_k(args, config)
    # before pre-training; locked, and never over a model or another run's files
    claim_output_dir(args.output_dir, command="raptor pretrain", resume=args.resume)
    if args.threads is not None:
        if args.threads < 1:
            raise ConfigError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    device = _device(args.device)
    quiet_transformers(args)  # --no-progress: no "Loading weights" bar either (--init-from)
    result = pretrain(config, resume=args.resume, progress=not args.no_progress, device=device)
    r = result.report
    summary = {k: r[k] for k in ("steps", "held_out_loss", "held_out_top1", "train_seconds", "tokens_per_second",
                                 "parameters")}
    summary["routing_held_out_after"] = {
        layer: {"load_entropy_ratio": round(s["load_entropy_ratio"], 4),
                "token_expert_mutual_information": round(s["token_expert_mutual_information"], 4),
                "top1_token_mutual_information_corrected": round(s["top1_token_mutual_information_corrected"], 4),
                "top1_modal_share": round(s["top1_modal_share"], 4)}
        for layer, s in r["routing_after"]["public_held_out"].items()}
    json.dump(summary, sys.stdout, indent=1)
    print(f"\nwrote {result.output_dir} (pretrain.json, routing.png, model and tokenizer)")
    return 0
