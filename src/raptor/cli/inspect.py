"""Public routing statistics per MoE layer and the recommended layer(s) to protect (no privacy cost).

Routes the PUBLIC corpus (``--public-file``, or the public slice of ``--task``/``--train-file``'s
training split, or of the bundled SST-2 sample) through the model with natural routing, assigns
each record its owner expert per MoE layer, and prints per layer: routing entropy H of the owner
shares (and H / log E), chi^2 distance to uniform (E sum pi^2 - 1, the mean squared mis-scaling of
the uniform denominator B/E), a split-half proxy of the public denominator's bias
(mean_e (pi_e^A / pi_hat_e^B - 1)^2 between two halves of the public corpus), min/max smoothed
shares, and, with ``--noise-multiplier``, the load-weighted noise variance
sum_e pi_hat_e sigma^2 C^2 d_e / (B pi_hat_e)^2. The rule: protect the layer(s) with the highest
entropy (ties to the later layer).

Privacy: reads the public corpus only; the private records are never loaded into the model.
"""

from __future__ import annotations

import argparse
import json

from raptor.cli.train import add_data_arguments, data_source, model_source


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_data_arguments(parser)
    parser.add_argument("--count", type=int, default=1, help="how many layers to recommend (default 1)")
    parser.add_argument("--batch-size", type=int, default=1024, help="expected batch size B for the variance")
    parser.add_argument("--noise-multiplier", type=float, default=None,
                        help="expert-stream sigma_e: fills the noise-variance column")
    parser.add_argument("--clip-expert", type=float, default=1.0, help="expert clip norm C for the variance")
    parser.add_argument("--seed", type=int, default=0, help="init seed of a tiny random model (default 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")


def run(args: argparse.Namespace) -> int:
    from raptor.cli.flag_checks import check_inspect_args
    from raptor.data.loaders import load_data, to_records
    from raptor.data.model_source import init_generator, load_model_and_tokenizer
    from raptor.training.setup.layer_report import layer_report

    check_inspect_args(args)  # before any data is read
    split = load_data(data_source(args)).split
    model, tokenizer = load_model_and_tokenizer(model_source(args), split.public, split.public.num_labels,
                                                init_generator(args.seed))
    public = to_records(tokenizer, split.public, args.max_length)
    choice = layer_report(model, public, count=args.count, batch_size=args.batch_size,
                          noise_multiplier=args.noise_multiplier, clip_expert=args.clip_expert)
    if args.json:
        out = choice.to_dict()
        out.update({"model": args.model, "public_records": int(public["labels"].shape[0]), "public_rule": split.rule})
        print(json.dumps(out, indent=2))
    else:
        print(f"public corpus: {len(split.public):,} records ({split.rule})")
        print(choice.format_table())
    return 0
