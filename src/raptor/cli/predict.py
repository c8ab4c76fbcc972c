"""Predict labels with a model a ``raptor train`` run saved: ``raptor predict --model OUTPUT_DIR --input FILE``.

``--model`` is the run's output directory (its ``model/`` is used) or that ``model/`` directory
itself. ``--input`` is a CSV/TSV/JSONL file with the text column(s) (a label column is not
needed). The output (``--output``, default ``FILE.predictions.csv``; ``.jsonl`` writes JSON Lines)
has one row per input record: its line, the predicted label and each label's probability (for a
regression model: its line and the predicted score).
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from raptor.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="OUTPUT_DIR of a raptor train run, or its model/ directory")
    parser.add_argument("--input", required=True, help="CSV/TSV/JSONL file with the text column(s)")
    parser.add_argument("--output", default=None,
                        help="predictions file, .csv or .jsonl (default: INPUT.predictions.csv)")
    parser.add_argument("--text-column", nargs="+", default=None,
                        help="one text column, or two for pairs (default: sentence1 sentence2, sentence or text)")
    parser.add_argument("--max-length", type=int, default=None,
                        help="tokens per record (default: the training run's, else 128)")
    parser.add_argument("--batch-size", type=int, default=64, help="records per forward pass (default 64)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default cpu)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (default: shown)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output file")


def model_dir(path: str | Path) -> Path:
    path = Path(path)
    if (path / "model" / "config.json").is_file():
        return path / "model"
    if (path / "config.json").is_file():
        return path
    if (path / "results.json").is_file() or (path / "checkpoint").is_dir():
        raise ConfigError(f"--model {path}: a raptor train run without its model (no model/config.json); the run "
                          "did not finish writing it, or model/ was moved or deleted: give the directory the model "
                          "is in, or train again (a run stopped early continues with --resume OUTPUT_DIR/checkpoint)")
    raise ConfigError(f"--model {path}: no model here; give the OUTPUT_DIR of a raptor train run or its model/ dir")


def run(args: argparse.Namespace) -> int:
    from raptor.training.run.preflight import check_device

    if args.batch_size < 1:
        raise ConfigError(f"--batch-size must be an integer >= 1, got {args.batch_size}")
    out = Path(args.output) if args.output else Path(str(args.input) + ".predictions.csv")
    if out.suffix not in (".csv", ".jsonl"):
        raise ConfigError(f"--output {out}: must end in .csv or .jsonl")
    if out.is_dir():
        raise ConfigError(f"--output {out}: is a directory; give a file name")
    from raptor.cli.flag_checks import check_model_dir, check_model_max_length, check_predict_output
    from raptor.data.user_files import read_texts

    check_predict_output(out, args.input, args.max_length)  # before anything is computed
    if out.exists() and not args.overwrite:
        raise ConfigError(f"--output {out}: already exists; pass --overwrite to replace it, or give another --output")
    from raptor.cli.run_lock import lock_output_dir
    from raptor.cli.run_output import quiet_transformers

    lock_output_dir(out.parent, "--output")  # one writer per directory, as raptor train
    quiet_transformers(args)  # --no-progress: no "Loading weights" bar either
    check_device(args.device)
    directory = model_dir(args.model)
    check_model_dir(directory)
    check_model_max_length(directory, args.max_length)  # not an IndexError in the position embedding
    lines, texts, pairs = read_texts(args.input, args.text_column)

    import torch
    from tqdm.auto import tqdm

    from raptor.data import ClassificationData, collate, encode
    from raptor.training.saving.final_model import load_final_model
    from raptor.training.step.plain import classification_logits

    model, tokenizer, names, saved_length = load_final_model(directory, args.device)
    max_length = args.max_length or saved_length or 128
    regression = not names
    data = ClassificationData(tuple(texts), (0.0 if regression else 0,) * len(texts), tuple(names),
                              tuple(pairs) if pairs else None, source=str(args.input),
                              task_type="regression" if regression else "classification")
    enc = encode(tokenizer, data, max_length=max_length)
    rows = []
    with torch.no_grad():
        for start in tqdm(range(0, len(enc), args.batch_size), disable=args.no_progress, desc="predict"):
            batch = collate(enc, range(start, min(start + args.batch_size, len(enc))))
            batch = {k: v.to(args.device) for k, v in batch.items()}
            logits = classification_logits(model, batch).float().cpu()
            if regression:
                rows.extend({"line": lines[start + i], "prediction": round(float(v), 6)}
                            for i, v in enumerate(logits.reshape(-1).tolist()))
                continue
            probs = torch.softmax(logits, dim=-1)
            for i, p in enumerate(probs.tolist()):
                rows.append({"line": lines[start + i], "prediction": names[int(probs[i].argmax())],
                             **{f"p_{n}": round(v, 6) for n, v in zip(names, p)}})
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".jsonl":
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        with out.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["line", "prediction"])
            writer.writeheader()
            writer.writerows(rows)
    print(f"raptor predict: {len(rows):,} predictions written to {out}")
    return 0


