"""``raptor train --objective generate``: DP fine-tuning of a decoder on (prompt, answer) pairs.

Data (JSON Lines):

* text decoders (``--model`` a tiny family name: olmoe, mixtral, qwen2_moe, qwen3_moe,
  deepseek_v2, deepseek_v3; or a local ``save_pretrained`` causal-LM directory): one record per
  line with ``--prompt-field`` (default ``prompt``) and ``--answer-field`` (default ``answer``);
* DeepSeek-VL2 (``--model DIR`` in the release layout, ``model_type`` ``deepseek_vl_v2``): one
  record per line with ``--image-field`` (default ``image``, a path relative to the JSONL file),
  ``--question-field`` (``question``) and ``--answer-field`` (``answer``). Every image is opened
  and decoded before anything else happens; a missing or corrupt one stops the run with an error
  naming the line.

The public corpus (routing statistics, layer choice, the tiny families' tokenizer) is only what
you declare: ``--public-file``, or a deterministic slice of the training file given on purpose
(``--public-size``); the training file is never sliced by default (``--method nonprivate`` uses
the training data itself; any other run without a public source stops with an error naming the
flags). results.json records the source. The privacy
unit is one record (one JSONL line); with several questions per image, protect the image by
putting one record per image.

Evaluation: greedy decoding on ``--validation-file`` (``--max-new-tokens``), exact match after
normalisation (case, punctuation, whitespace) and token F1, before training (zero-shot, written
as ``zero_shot`` in results.json) and at every evaluation point.

The reference's DeepSeek-VL2 settings (RAPTOR paper): epsilon 8, delta 1e-5, shared ratio 0.9,
alternating schedule 1:1, LoRA rank 16 for dp-lora, shared experts frozen:

    raptor train --model VL2_DIR --objective generate --train-file vqa.jsonl --validation-file dev.jsonl --public-file public_vqa.jsonl \\
        --method raptor --epsilon 8 --delta 1e-5 --shared-ratio 0.9 --alternate 1:1 --freeze-shared-experts
    raptor train ... --method dp-lora --lora-rank 16 --epsilon 8 --delta 1e-5

Runs as ``raptor train`` (the same functions): flags, ``--output-dir`` (``--overwrite``),
``--device``, ``--model`` and ``--resume`` checked before anything is read; ``--batch-size``
default N/10; checkpoints (``OUTPUT_DIR/checkpoint``) before the first update, every
``--checkpoint-every`` steps and at the end, holding the initial weights not in a base checkpoint
(a tiny family's random init), the tokenizer, the plan and public statistics, the ledger, the
optimizers, the generator states and a fingerprint of the config (``--freeze-shared-experts`` and
the objective included) and data, so that ``--resume`` continues the same run exactly, seeded or
not, and refuses a changed one naming the fields; ``OUTPUT_DIR/model``: the fine-tuned model
(``save_pretrained``, or DeepSeek-VL2's release layout) with its tokenizer, named in
``results.json`` (``final_model``).

Privacy: as ``raptor train`` (the training loss is never shown; the progress bar shows the dev
exact match, dev loss and epsilon).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from raptor.errors import ConfigError

if TYPE_CHECKING:
    import torch


def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("generative objective (--objective generate)")
    group.add_argument("--prompt-field", default="prompt", help="JSONL prompt field (text decoders) (default prompt)")
    group.add_argument("--answer-field", default="answer", help="JSONL answer field (default answer)")
    group.add_argument("--image-field", default="image", help="JSONL image-path field (DeepSeek-VL2) (default image)")
    group.add_argument("--question-field", default="question", help="JSONL question field (DeepSeek-VL2) (default question)")
    group.add_argument("--max-new-tokens", type=int, default=8, help="greedy decoding length (default 8)")
    group.add_argument("--lora-rank", type=int, default=8, help="dp-lora rank, both objectives (the reference's VL2 setting: 16) (default 8)")
    group.add_argument("--freeze-shared-experts", action="store_true",
                       help="keep the MoE shared experts frozen (the reference's VL2 setting) instead of "
                            "training them in the shared group (default off)")


def _model_type(model: str) -> str | None:
    config = Path(model) / "config.json"
    return json.loads(config.read_text()).get("model_type") if config.is_file() else None


def public_source_of(args):
    """The declared public source of a generative run (never a silent slice of --train-file)."""
    from raptor.data.public_source import resolve_public_source

    return resolve_public_source(public_file=args.public_file, public_size=args.public_size, user_data=True,
                                 nonprivate=args.method == "nonprivate",
                                 needs=("public routing statistics and the layer choice",))


def _public_split(n: int, args, what: str):
    """(public indices, private indices) of a ``--public-size`` slice, or of the training data itself
    for a non-private run without a declared source."""
    from raptor.data.public import public_indices

    source = public_source_of(args)
    if source.kind == "training-data":
        return list(range(n)), list(range(n))
    public = set(public_indices(n, source.size, seed=0))
    if not public or len(public) >= n:
        raise ConfigError(f"--public-size {args.public_size} leaves no public or no private {what} records")
    return sorted(public), [i for i in range(n) if i not in public]


@dataclass(frozen=True)
class GenerateInputs:
    """A generative run before anything is encoded: the model and tokenizer as loaded or drawn, the
    raw private/public/dev records, whether the model is DeepSeek-VL2, the record counts, and the
    weights read unchanged from a base checkpoint (``base``: they need not be stored for resume)."""

    model: object
    tokenizer: object
    private: object
    public: object
    dev: object
    vl2: bool
    info: dict
    base: dict


def _split_data(args, train, read, what: str):
    if args.public_file:
        public, private = read(args.public_file), train
    else:
        pub_idx, priv_idx = _public_split(len(train), args, what)
        public, private = train.subset(pub_idx), train.subset(priv_idx)
    return public, private.subset(range(min(len(private), args.max_train_samples or len(private))))


def _info(args, kind: str, private, public, dev) -> dict:
    return {"private_records": len(private), "public_records": len(public),
            "dev_records": len(dev) if dev is not None else 0, "source": f"{kind} file {args.train_file}"}


def read_vqa_inputs(args, generator: torch.Generator) -> GenerateInputs:
    """DeepSeek-VL2: every image of every split checked, then the model from ``--model``."""
    from raptor.data.vqa import read_vqa_jsonl
    from raptor.moe.vl2 import load_vl2

    fields = dict(image_field=args.image_field, question_field=args.question_field, answer_field=args.answer_field)
    read = lambda f: read_vqa_jsonl(f, **fields)  # noqa: E731
    train = read(args.train_file)  # every image checked here, before anything else
    dev = read(args.validation_file) if args.validation_file else None
    public, private = _split_data(args, train, read, "VQA")
    if dev is not None and args.max_eval_samples:
        dev = dev.subset(range(min(len(dev), args.max_eval_samples)))
    model = load_vl2(args.model)  # refuses a directory that does not fill every parameter
    base = {n: tuple(p.shape) for n, p in model.named_parameters()}
    return GenerateInputs(model, _load_tokenizer(args.tokenizer or args.model), private, public, dev, True,
                          _info(args, "VQA", private, public, dev), base)


def read_text_inputs(args, generator: torch.Generator) -> GenerateInputs:
    """Text decoders: a tiny family drawn from ``generator`` (tokenizer trained on the public
    corpus) or a ``save_pretrained`` directory."""
    from raptor.data.qa import read_qa_jsonl
    from raptor.data.tokenization import train_wordpiece
    from raptor.moe.causal import CAUSAL_CLASSES, build_causal_lm, load_causal_lm
    from raptor.moe.models import TinySize
    from raptor.training.run_start import base_weights

    fields = dict(prompt_field=args.prompt_field, answer_field=args.answer_field)
    read = lambda f: read_qa_jsonl(f, **fields)  # noqa: E731
    train = read(args.train_file)
    dev = read(args.validation_file) if args.validation_file else None
    public, private = _split_data(args, train, read, "QA")
    if dev is not None and args.max_eval_samples:
        dev = dev.subset(range(min(len(dev), args.max_eval_samples)))
    if args.model in CAUSAL_CLASSES:
        tokenizer = _load_tokenizer(args.tokenizer) if args.tokenizer else \
            train_wordpiece(public.corpus(), vocab_size=args.vocab_size, lowercase=True, min_frequency=1)
        size = TinySize(vocab_size=max(len(tokenizer), 8), hidden_size=args.hidden_size, num_layers=args.num_layers,
                        num_heads=4, num_experts=args.num_experts, top_k=2, expert_intermediate=2 * args.hidden_size,
                        max_positions=max(256, args.max_length))
        model, base = build_causal_lm(args.model, size=size, generator=generator), {}
    else:
        model, base = load_causal_lm(args.model), base_weights(args.model)
        tokenizer = _load_tokenizer(args.tokenizer or args.model)
    return GenerateInputs(model, tokenizer, private, public, dev, False, _info(args, "QA", private, public, dev), base)


def encode_inputs(args, inputs: GenerateInputs, model, tokenizer):
    """(train, public, validation records, GenerationEval) with the run's ``model`` and ``tokenizer``
    (on resume: the checkpoint's)."""
    if inputs.vl2:
        from raptor.training.vl2_processor import Vl2Processor

        proc = Vl2Processor(model, tokenizer)
        enc = lambda d: proc.encode(d, max_length=args.max_length)  # noqa: E731
        evaluation = proc.generation_eval(inputs.dev, max_new_tokens=args.max_new_tokens) \
            if inputs.dev is not None else None
    else:
        from raptor.data.qa import encode_qa, qa_generation_eval

        enc = lambda d: encode_qa(tokenizer, d, max_length=args.max_length)  # noqa: E731
        evaluation = qa_generation_eval(tokenizer, inputs.dev, max_length=args.max_length,
                                        max_new_tokens=args.max_new_tokens) if inputs.dev is not None else None
    return (enc(inputs.private), enc(inputs.public), enc(inputs.dev) if inputs.dev is not None else None,
            evaluation)


def _load_run(read, args, generator):
    inputs = read(args, generator)
    return (inputs.model, inputs.tokenizer, *encode_inputs(args, inputs, inputs.model, inputs.tokenizer),
            inputs.info)


def load_vqa_run(args, generator: torch.Generator):
    """(model, tokenizer, train, public, validation records, GenerationEval, description)."""
    return _load_run(read_vqa_inputs, args, generator)


def load_text_run(args, generator: torch.Generator):
    """(model, tokenizer, train, public, validation records, GenerationEval, description)."""
    return _load_run(read_text_inputs, args, generator)


def _load_tokenizer(path):
    """A tokenizer directory's ``tokenizer.json`` read directly (no AutoConfig lookup of the model)."""
    from transformers import PreTrainedTokenizerFast

    from raptor.data.tokenization import load_tokenizer

    p = Path(path)
    if p.is_dir() and (p / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(str(p))
    return load_tokenizer(path)


def run_generate(args: argparse.Namespace) -> int:
    """check -> data -> model -> (resume) -> train (checkpoints from step 0) -> final model and results,
    through the seams of ``raptor train`` (:func:`raptor.cli.train.check_before_training`,
    :func:`raptor.training.run_start.start_run` / ``continue_run``,
    :func:`raptor.training.final_model.save_final_model`)."""
    from raptor.cli.train import check_before_training, nonfinite_warning, settings_line, write_results
    from raptor.errors import BudgetExceededError
    from raptor.mechanisms import GeneratorSpec
    from raptor.moe.vl2.config import MODEL_TYPE
    from raptor.training.build import build_trainer
    from raptor.training.config import with_batch_size
    from raptor.training.final_model import save_final_model
    from raptor.training.generate import GenerativeObjective, evaluate_generation
    from raptor.training.run_checks import fingerprint
    from raptor.training.run_start import continue_run, start_run

    if not args.train_file:
        raise ConfigError("--objective generate needs --train-file (JSONL: prompt/answer, or image/question/answer)")
    if args.task or args.data_dir:
        raise ConfigError("--objective generate reads --train-file JSONL; --task/--data-dir are for classification")
    if args.head_init != "random":
        raise ConfigError("--head-init applies to classification heads; --objective generate keeps the LM head")
    config = check_before_training(args)  # flags, --output-dir (--overwrite), --device, --model, --resume
    source = public_source_of(args)  # declared before anything is read
    started = time.perf_counter()
    init = GeneratorSpec(secure=config.privacy.secure_rng, seed=config.seed).make(3)
    read = read_vqa_inputs if _model_type(args.model) == MODEL_TYPE else read_text_inputs
    inputs = read(args, init)
    data_info = inputs.info
    n = data_info["private_records"]
    config = with_batch_size(config, n)  # --batch-size default: N/10, as classification
    if config.batch_size >= n:
        raise ConfigError(f"--batch-size {config.batch_size} must be below the {n} private records")
    fp = fingerprint(dict(config.to_dict(), objective="generate", freeze_shared_experts=args.freeze_shared_experts),
                     model=args.model, train=inputs.private, public=inputs.public, validation=inputs.dev,
                     label_names=[], public_source=source.to_dict())
    # a resumed run: refused if changed (fields named), else the checkpoint's initial weights and tokenizer
    start = start_run(inputs.model, inputs.tokenizer, fingerprint=fp, resume=args.resume, base=inputs.base)
    tokenizer = start.tokenizer
    train, public, val, evaluation = encode_inputs(args, inputs, start.model, tokenizer)
    print(settings_line(args, config, n).replace("raptor train:", "raptor train (generate):", 1)
          + ("" if config.privacy.secure_rng else "  [SEEDED: reproducible, NOT secure]"), flush=True)
    zero_shot = evaluate_generation(start.model, evaluation, tokenizer) if evaluation is not None else None
    objective = GenerativeObjective(evaluation=evaluation, tokenizer=tokenizer,
                                    freeze_shared_experts=args.freeze_shared_experts)
    trainer = build_trainer(config, start.model, train=train, validation=val, public=public, objective=objective)
    continue_run(trainer, start)
    print(f"raptor train (generate): {config.method} on {data_info['source']}: {n:,} "
          f"private / {data_info['public_records']:,} public / {data_info['dev_records']:,} dev records; "
          f"{trainer.plan.steps} steps, q={trainer.sample_rate:.4g}, sigma_s={trainer.plan.sigmas['shared']}, "
          f"sigma_e={trainer.plan.sigmas['expert']}, trained layers {list(trainer.plan.trained_layers)}"
          + (f"; zero-shot exact match {zero_shot['exact_match']:.3f}" if zero_shot else "")
          + (f"; resumed at step {trainer.state.step}" if args.resume else "")
          + f"\nrandomness: {trainer.randomness}")
    out = config.output_path
    out.mkdir(parents=True, exist_ok=True)
    stopped = None
    try:
        results = trainer.fit(progress=not args.no_progress, checkpoint_every=args.checkpoint_every,
                              checkpoint_start=True)
    except BudgetExceededError as err:  # the checkpoint is saved; write results and the model, then fail
        stopped, results = err, err.results
    trainer.save(out / "checkpoint")
    save_final_model(out / "model", trainer.model, tokenizer, None, config.max_length)
    results.update({
        "data": dict(data_info, public_source=source.to_dict()), "model": args.model, "zero_shot": zero_shot,
        "freeze_shared_experts": args.freeze_shared_experts, "final_model": str(out / "model"),
        "defaults": {"batch_size": args.batch_size is None, "lr": args.lr is None},
        "num_trainable_parameters": sum(p.numel() for p in trainer.params.values()),
        "total_seconds": time.perf_counter() - started,
    })
    if stopped is not None:
        results["stopped_by_budget"] = str(stopped)
    write_results(out / "results.json", results)
    if stopped is not None:
        print(f"raptor train: wrote {out / 'results.json'}, {out / 'checkpoint'} and {out / 'model'} before "
              "stopping", file=sys.stderr)
        raise stopped
    eps = results["epsilon"]
    em = results["final_exact_match"]
    zs = f" (zero-shot {zero_shot['exact_match']:.3f})" if zero_shot else ""
    print(f"dev exact match {em}{zs}, token F1 {results['final_token_f1']}, "
          + (f"epsilon {eps:.4g} at delta {results['delta']}" if math.isfinite(eps) else "non-private (epsilon = inf)"))
    print(f"wrote {out / 'results.json'} and the fine-tuned model in {out / 'model'}")
    warning = nonfinite_warning(results["nonfinite_records_diagnostic_not_dp"])
    if warning:
        print(warning, file=sys.stderr)
    return 0
