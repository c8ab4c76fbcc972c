"""Train a tiny Switch model NON-privately on the bundled SST-2 sample and print dev accuracy.

The main job of the foundation issue (a later issue replaces it with a DP demo). Steps:

1. load the SST-2 sample shipped inside the package (8,000 train / 872 dev records);
2. split off a public slice of the train records (``--public-size``, default 20%) and train a
   WordPiece tokenizer on it only; the model trains on the remaining (private) records;
3. build a tiny ``switch_transformers`` classifier (random init from a seeded ``torch.Generator``);
4. train it with AdamW (linear warm-up and decay), shuffling with its own seeded generator, with a
   tqdm progress bar showing the loss;
5. print the dev accuracy and write ``results.json``, the tokenizer and the model to
   ``--output-dir`` (default ``runs/demo``).

No privacy: this trains on the private records with plain AdamW. Nothing here is DP.

Measured on this project's 2-core machine (1 torch thread): about 30 s of CPU time, 35-80 s wall
depending on what else runs; dev accuracy 0.755 / 0.748 / 0.772 for seeds 0 / 1 / 2 (majority
class 0.509).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from raptor import __version__
from raptor.data import (
    EncodedData,
    check_tokenizer_matches_model,
    collate,
    encode,
    load_bundled_sst2,
    save_tokenizer,
    split_public_private,
    train_wordpiece,
)
from raptor.errors import ConfigError
from raptor.moe.models import TinySize, build_model

FAMILY = "switch_transformers"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--epochs", type=int, default=4, help="passes over the training records (default 4)")
    parser.add_argument("--batch-size", type=int, default=32, help="records per step (default 32)")
    parser.add_argument("--lr", type=float, default=5e-4, help="AdamW peak learning rate (default 5e-4)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the init, shuffling and public split (default 0)")
    parser.add_argument("--output-dir", type=Path, default=Path("runs/demo"),
                        help="where results.json, the tokenizer and the model go (default runs/demo)")
    parser.add_argument("--max-length", type=int, default=64, help="tokens per record after truncation (default 64)")
    parser.add_argument("--public-size", type=float, default=0.2,
                        help="fraction of the train records used as the public corpus for the tokenizer (default 0.2)")
    parser.add_argument("--vocab-size", type=int, default=4000, help="WordPiece vocabulary size (default 4000)")
    parser.add_argument("--max-train-samples", type=int, default=None,
                        help="use only the first N training records after the split (for quick checks)")
    parser.add_argument("--max-eval-samples", type=int, default=None,
                        help="evaluate on only the first N dev records (for quick checks)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (default 1: the tiny model gains nothing from more, and "
                             "loses much when other processes share the cores)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _check_args(args: argparse.Namespace) -> None:
    positive = ("epochs", "batch_size", "max_length", "vocab_size", "threads")
    for name in positive:
        value = getattr(args, name)
        if value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    if not (args.lr > 0 and math.isfinite(args.lr)):
        raise ConfigError(f"--lr must be a positive finite number, got {args.lr}")
    for name in ("max_train_samples", "max_eval_samples"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be a positive integer, got {value}")


def model_size(vocab_size: int, max_length: int) -> TinySize:
    """The demo's model: 2 sparse encoder layers of 4 experts, d_model 64."""
    return TinySize(vocab_size=vocab_size, hidden_size=64, num_layers=2, num_heads=4, num_experts=4, top_k=1,
                    expert_intermediate=128, max_positions=max(64, max_length))


def train_non_private(
    model: torch.nn.Module,
    train: EncodedData,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    generator: torch.Generator,
    progress: bool = True,
) -> list[float]:
    """Plain (non-private) AdamW training with shuffled mini-batches; returns the per-step losses.

    Linear warm-up over the first 6% of steps, then linear decay to zero; weight decay 0.01.
    Shuffling draws from ``generator`` only.
    """
    steps_per_epoch = math.ceil(len(train) / batch_size)
    total = epochs * steps_per_epoch
    warmup = max(1, round(0.06 * total))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda t: min((t + 1) / warmup, max(0.0, (total - t) / max(1, total - warmup)))
    )
    losses: list[float] = []
    model.train()
    bar = tqdm(total=total, desc="demo (non-private)", unit="step", disable=not progress)
    for epoch in range(epochs):
        order = torch.randperm(len(train), generator=generator).tolist()
        for start in range(0, len(order), batch_size):
            batch = collate(train, order[start : start + batch_size])
            loss = model(**batch).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            losses.append(float(loss.detach()))
            recent = losses[-steps_per_epoch:]
            bar.set_postfix(epoch=epoch + 1, loss=f"{sum(recent) / len(recent):.4f}")
            bar.update(1)
    bar.close()
    model.eval()
    return losses


@torch.no_grad()
def accuracy(model: torch.nn.Module, data: EncodedData, *, batch_size: int = 128) -> float:
    """Fraction of records whose argmax logit equals the label."""
    model.eval()
    correct = 0
    for start in range(0, len(data), batch_size):
        batch = collate(data, range(start, min(start + batch_size, len(data))))
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        correct += int((logits.argmax(dim=-1) == batch["labels"]).sum())
    return correct / max(1, len(data))


def run(args: argparse.Namespace) -> int:
    _check_args(args)
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    splits = load_bundled_sst2()
    split = split_public_private(splits.train, public_size=args.public_size, seed=args.seed)
    private = split.private
    if args.max_train_samples is not None:
        private = private.subset(range(min(args.max_train_samples, len(private))))
    dev = splits.validation
    if args.max_eval_samples is not None:
        dev = dev.subset(range(min(args.max_eval_samples, len(dev))))

    tokenizer = train_wordpiece(split.public.corpus(), vocab_size=args.vocab_size, lowercase=True)
    train_enc = encode(tokenizer, private, max_length=args.max_length)
    dev_enc = encode(tokenizer, dev, max_length=args.max_length)

    size = model_size(len(tokenizer), args.max_length)
    init_generator = torch.Generator().manual_seed(args.seed)
    shuffle_generator = torch.Generator().manual_seed(args.seed + 1)
    model = build_model(FAMILY, num_labels=private.num_labels, generator=init_generator, size=size)
    check_tokenizer_matches_model(tokenizer, model.config)
    num_params = sum(p.numel() for p in model.parameters())
    print(
        f"raptor demo (NON-private): tiny {FAMILY} ({num_params:,} parameters), "
        f"{len(private):,} train / {len(dev):,} dev records, tokenizer of {len(tokenizer):,} tokens "
        f"trained on {len(split.public):,} public records"
    )

    train_started = time.perf_counter()
    losses = train_non_private(
        model, train_enc, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
        generator=shuffle_generator, progress=not args.no_progress,
    )
    train_seconds = time.perf_counter() - train_started
    dev_accuracy = accuracy(model, dev_enc)
    majority = max(dev.label_counts()) / len(dev)
    print(f"dev accuracy: {dev_accuracy:.4f}  (majority class: {majority:.4f}, {len(dev)} records)")

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_tokenizer(tokenizer, out / "tokenizer")
    model.save_pretrained(str(out / "model"))
    last = losses[-math.ceil(len(train_enc) / args.batch_size):]
    results = {
        "command": "raptor demo",
        "private": False,
        "task": "sst2 (bundled sample)",
        "model_family": FAMILY,
        "model_size": size.__dict__,
        "num_parameters": num_params,
        "train_records": len(private),
        "public_records": len(split.public),
        "public_rule": split.rule,
        "dev_records": len(dev),
        "tokenizer_vocab_size": len(tokenizer),
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "seed": args.seed,
        "max_length": args.max_length,
        "steps": len(losses),
        "final_epoch_mean_train_loss": sum(last) / len(last),
        "dev_accuracy": dev_accuracy,
        "dev_majority_class_accuracy": majority,
        "train_seconds": round(train_seconds, 2),
        "total_seconds": round(time.perf_counter() - started, 2),
        "raptor_version": __version__,
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out / 'results.json'}")
    return 0
