"""``raptor train --recipe NAME``: a named set of defaults; a flag given on the command line wins.

The flags a recipe sets default to None in the parser, so that "given" and "left to its default"
differ; :func:`apply_recipe` fills each None from the recipe (or from the library's default when
no recipe is given). The recipe itself is :data:`raptor.recipes.RECIPES` (one source): the
CLI only reads its fields.
"""

from __future__ import annotations

import argparse

from raptor.cli.sections import section
from raptor.errors import ConfigError
from raptor.recipes import RECIPES
from raptor.training.config import TrainConfig, method_default_lora

#: flag dest -> how to read its value from a TrainConfig: the flags whose parser default is None.
#: The recipe's other fields (epochs 3, C_s = C_e = 1, AdamW, max length 128) are the parser's
#: defaults already (tests/cli/test_recipe.py checks both).
_FIELDS = {
    "batch_size": lambda c: c.batch_size,
    "layers": lambda c: ",".join(map(str, c.layers)) if isinstance(c.layers, tuple) else c.layers,
    "lora": lambda c: c.lora,
    "freeze_head": lambda c: c.freeze_head,
    "shared_ratio": lambda c: c.privacy.shared_ratio,
    "lr": lambda c: c.optim.lr,
}
#: flags whose None means the library default when no recipe is given (--lr and --batch-size keep
#: their own default rules: by model kind and LoRA, and N/10; --lora: on for a pre-trained model)
_LIBRARY_DEFAULT = ("layers", "freeze_head", "shared_ratio")
_PLAIN = TrainConfig()


def add_recipe_arguments(parser: argparse.ArgumentParser) -> None:
    method_g, privacy_g = section(parser, "method"), section(parser, "privacy")
    method_g.add_argument("--recipe", choices=sorted(RECIPES), default=None,
                          help="a named set of defaults; flags given explicitly win. paper: the reference's protocol "
                               "(frozen label-word head, LoRA r 8 in both streams, last MoE layer, B 1024, AdamW lr "
                               "2e-4, 3 epochs, C 1, shared ratio 0.3, max length 128; docs/METHOD.md) (default none)")
    method_g.add_argument("--lora", nargs="?", type=_rank, const=True, default=None, metavar="RANK",
                          help="train LoRA adapters of rank RANK (8 when no rank is given) on the method's own set "
                               "(attention LoRA in the shared stream, one LoRA per expert of the trained layers in the "
                               "expert stream); with --method dp-lora, which is always LoRA, it sets the rank (the "
                               "reference's DeepSeek-VL2 setting: --lora 16) (default: on, r 8, for a pre-trained "
                               "--model such as minilm-moe; off for a tiny one)")
    method_g.add_argument("--no-lora", dest="lora", action="store_const", const=False,
                          help="train the method's full weights, not LoRA adapters (a pre-trained --model's lr is "
                               "then 2e-4 unless --lr is given) (default: LoRA on a pre-trained --model)")
    method_g.add_argument("--freeze-head", action="store_true", default=None,
                          help="keep the output head at its initial (e.g. label-word) weights: in no clipping group, "
                               "never updated (default off)")
    privacy_g.add_argument("--shared-split", choices=("none", "head"), default="none",
                           help="head: clip the output head and the backbone as two groups of the shared stream, each "
                                "at its public median scale, noised as one Gaussian (same budget) (default none)")


def _rank(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"the LoRA rank must be an integer, got {text!r}") from None


def lora_settings(args: argparse.Namespace, method: str) -> dict:
    """``lora`` and ``lora_rank`` of the config from ``--lora [RANK]`` (dp-lora is LoRA by its method:
    the flag only sets its rank)."""
    value = args.lora
    rank = value if isinstance(value, int) and not isinstance(value, bool) else TrainConfig.lora_rank
    return {"lora": bool(value) and method != "dp-lora", "lora_rank": rank}


def apply_recipe(args: argparse.Namespace) -> argparse.Namespace:
    """Fill every recipe-governed flag left at None (idempotent): from ``--recipe`` when given, else
    the library default (``--lr``/``--batch-size`` None keep their own default rules)."""
    name = getattr(args, "recipe", None)
    if name is not None and name not in RECIPES:
        raise ConfigError(f"--recipe must be one of {sorted(RECIPES)}, got {name!r}")
    recipe = RECIPES[name](args.method) if name else None
    for dest, read in _FIELDS.items():
        if getattr(args, dest, None) is not None:
            continue
        if recipe is not None:
            setattr(args, dest, read(recipe))
        elif dest in _LIBRARY_DEFAULT:
            setattr(args, dest, read(_PLAIN))
        elif dest == "lora":
            args.lora = method_default_lora(getattr(args, "model", None), args.method)
    if getattr(args, "head_init", None) is None:
        args.head_init = "label-words" if name and getattr(args, "objective", "classify") == "classify" else "random"
    return args
