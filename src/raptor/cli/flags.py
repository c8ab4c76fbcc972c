"""``raptor train``'s flags, built from the settings' field metadata, and the one translator from
field names to flags.

The settings are the fields of :class:`~raptor.training.config.TrainConfig` (dotted paths:
``epochs``, ``privacy.epsilon``, ``optim.lr``) and of the command's own settings
(:data:`raptor.cli.settings.SETTINGS`: ``data.*``, ``model.*``, ``run.*``). A field whose metadata
names a ``flag`` (:func:`raptor.training.config.setting`) is a first-class flag, in its help
section; every other field is set by ``--set PATH=VALUE``. So a new field is one edit: its
declaration.

* :func:`add_train_flags`: the parser (the first-class flags, ``--recipe`` and ``--set``).
* :func:`resolve_train_args`: the parsed namespace completed (every command setting as an
  attribute, ``--set`` values applied) and the run's config: the recipe's config (``--recipe``) or
  the library's defaults for the method and model
  (:func:`~raptor.training.config.default_train_config`), then the flags given, then ``--set``.
* :func:`flag_for` / :func:`translate`: the flag that sets a field, and a library error
  (``PrivacyConfig.epsilon must be ...``) restated with it (``--epsilon must be ...``).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import typing
from collections.abc import Mapping, Sequence

from raptor.cli.sections import section
from raptor.cli.set_fields import convert, leaf_fields, type_words
from raptor.cli.settings import SETTINGS
from raptor.errors import ConfigError
from raptor.training.config import TrainConfig, is_private, lora_rule


def schema(config_cls: type = TrainConfig, settings: Mapping[str, type] | None = None) -> dict[str, dataclasses.Field]:
    """``{dotted path: field}`` of every leaf setting: the config's fields (no prefix) and each
    settings class's under its prefix."""
    out = {path: f for path, (f, _) in leaf_fields(config_cls).items()}
    for prefix, cls in (SETTINGS if settings is None else settings).items():
        out.update({f"{prefix}.{path}": f for path, (f, _) in leaf_fields(cls).items()})
    return out


def types(config_cls: type = TrainConfig, settings: Mapping[str, type] | None = None) -> dict[str, object]:
    """``{dotted path: declared type}`` of the same leaves."""
    out = {path: kind for path, (_, kind) in leaf_fields(config_cls).items()}
    for prefix, cls in (SETTINGS if settings is None else settings).items():
        out.update({f"{prefix}.{path}": kind for path, (_, kind) in leaf_fields(cls).items()})
    return out


def flag_for(path: str, config_cls: type = TrainConfig, settings: Mapping[str, type] | None = None) -> str:
    """How a user sets the field ``path``: its flag (``--epsilon``), the flag that sets it with
    another (``--seed`` for ``privacy.secure_rng``), else ``--set PATH``."""
    found = schema(config_cls, settings).get(path)
    meta = found.metadata if found is not None else {}
    return meta.get("flag") or meta.get("set_by") or f"--set {path}"


def _class_prefixes(cls: type, prefix: str = "") -> dict[str, str]:
    """``{class name: path prefix}`` of the config dataclass ``cls`` and every nested one."""
    out = {cls.__name__: prefix}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out.update(_class_prefixes(hints[f.name], f"{prefix}{f.name}."))
    return out


def translate(err: ConfigError, config_cls: type = TrainConfig) -> ConfigError:
    """A library error naming a config field (``PrivacyConfig.epsilon must be ...``) restated with
    the way the CLI sets it (``--epsilon must be ...``, ``--set privacy.pseudo_count must be ...``);
    any other error is returned as it is."""
    m = re.match(r"^(\w+)\.(\w+) (.*)$", str(err), re.S)
    prefixes = _class_prefixes(config_cls)
    if m and m.group(1) in prefixes:
        path = prefixes[m.group(1)] + m.group(2)
        if path in schema(config_cls):
            return ConfigError(f"{flag_for(path, config_cls)} {m.group(3)}")
    return err


def restate(message: str, config_cls: type = TrainConfig, settings: Mapping[str, type] | None = None) -> str:
    """A message naming settings by their paths (``privacy.clip_rule=uniform``, ``run.dist_backend``,
    ``freeze_head=true``) as ``raptor train`` sets them: ``--set privacy.clip_rule=uniform``, or the
    flag (``optim.lr=0.1`` -> ``--lr 0.1``). Only dotted paths and ``PATH=`` are read as settings,
    so prose is left alone; text already after ``--set`` is kept."""
    settings = SETTINGS if settings is None else settings
    paths = schema(config_cls, settings)
    names = sorted(paths, key=len, reverse=True)
    if message.startswith("--set "):  # the CLI's own message about a --set item says it already
        return message
    pattern = re.compile(r"(?<![\w.'\"-])(--set )?(" + "|".join(map(re.escape, names)) + r")(=[^\s;,()]*)?(?![\w.])")

    def one(m: re.Match) -> str:
        already, path, value = m.group(1), m.group(2), m.group(3)
        quoted = m.start() > 0 and message[m.start() - 1] == "(" and message[m.end():m.end() + 1] == ")"
        if already or quoted or ("." not in path and value is None):  # "--lr (optim.lr)" names both
            return m.group(0)
        flag = paths[path].metadata.get("flag")
        if flag:
            return flag + (f" {value[1:]}" if value else "")
        return f"--set {path}{value or ''}"

    return pattern.sub(one, message)


class _Text:
    """argparse ``type=``: the text as a value of the field's declared type (argparse names the type
    in its error: ``invalid int value``)."""

    def __init__(self, kind) -> None:
        self.kind = kind
        options = [o for o in typing.get_args(kind) if o is not type(None)] or [kind]
        self.__name__ = getattr(options[0], "__name__", str(options[0]))

    def __call__(self, text: str):
        try:
            return convert(self.kind, text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"invalid {self.__name__} value: {text!r}") from err


def _default_text(f: dataclasses.Field) -> str:
    meta = f.metadata
    if meta.get("default_text") is not None:
        return meta["default_text"]
    value = f.default
    if isinstance(value, tuple):
        return " ".join(map(str, value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def _choices(f: dataclasses.Field):
    choices = f.metadata.get("cli", {}).get("choices")
    return choices() if callable(choices) else choices


def _rank(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"the LoRA rank must be an integer, got {text!r}") from None


def add_flag(parser: argparse.ArgumentParser, path: str, f: dataclasses.Field, kind, *, flag: str | None = None,
             default=None, group=None) -> None:
    """One field as a flag (``flag`` or its metadata's), in the help section of its metadata."""
    meta, cli = f.metadata, dict(f.metadata.get("cli", {}))
    flag = flag or meta.get("flag") or "--" + path.rsplit(".", 1)[-1].replace("_", "-")
    group = group if group is not None else section(parser, meta.get("section") or "run")
    text = f"{meta.get('help') or path} (default {_default_text(f)})"
    if path == "lora":  # --lora [RANK] and --no-lora: one field, two flags
        group.add_argument(flag, nargs="?", type=_rank, const=True, default=None, metavar="RANK", help=text)
        group.add_argument("--no-lora", dest="lora", action="store_const", const=False,
                           help="train the method's full weights, not LoRA adapters (default: LoRA on a pre-trained --model)")
        return
    kwargs = {"help": text, "default": default}
    if cli.get("action"):
        kwargs["action"] = cli["action"]
    else:
        nargs = cli.get("nargs")
        element = typing.get_args([o for o in typing.get_args(kind) if o is not type(None)][0])[0] if nargs else kind
        kwargs.update(type=str if element is str else _Text(element), choices=_choices(f))
        if nargs:
            kwargs["nargs"] = nargs
        if cli.get("metavar"):
            kwargs["metavar"] = cli["metavar"]
    group.add_argument(flag, **kwargs)


def add_train_flags(parser: argparse.ArgumentParser, config_cls: type = TrainConfig,
                    settings: Mapping[str, type] | None = None) -> None:
    """Every first-class flag of ``raptor train`` (the fields with a ``flag``), ``--recipe`` and
    ``--set``. A config flag defaults to None ("not given": the recipe's or the library's value
    applies); a command setting's flag to its field's default."""
    from raptor.recipes import RECIPES

    settings = SETTINGS if settings is None else settings
    kinds, every = types(config_cls, settings), schema(config_cls, settings)
    first = [p for p in every if p.split(".", 1)[0] in ("data", "model")]  # --help order: data, model, the
    ordered = [*first, *(p for p in every if p not in first and p.split(".", 1)[0] != "run"),  # config, the run
               *(p for p in every if p.split(".", 1)[0] == "run")]
    for path in ordered:
        f = every[path]
        if f.metadata.get("flag"):
            is_setting = path.split(".", 1)[0] in settings
            add_flag(parser, path, f, kinds[path], default=f.default if is_setting else None)
    section(parser, "method").add_argument(
        "--recipe", choices=sorted(RECIPES), default=None,
        help="a named set of defaults; flags given explicitly win. paper: the reference's protocol (frozen label-word "
             "head, LoRA r 8 in both streams, last MoE layer, B 1024, AdamW lr 2e-4, 3 epochs, C 1, shared ratio 0.3, "
             "max length 128; docs/METHOD.md) (default none)")
    section(parser, "run").add_argument(
        "--set", action="append", default=None, metavar="PATH=VALUE",
        help="any other setting by its dotted path, type-checked against its declaration: e.g. --set "
             "privacy.shared_ratio=0.5 --set optim.weight_decay=0 --set eval_every=10 --set model.hidden_size=128 "
             "--set run.checkpoint_every=50 (repeatable; `raptor train --set list` lists them all) (default: none)")


def parse_sets(items: Sequence[str] | None, config_cls: type = TrainConfig,
               settings: Mapping[str, type] | None = None) -> dict[str, object]:
    """``{dotted path: value}`` of ``--set`` items ``PATH=VALUE``: each path a setting without a flag
    of its own, each value converted by the field's declared type and within its choices."""
    fields_, kinds = schema(config_cls, settings), types(config_cls, settings)
    out: dict[str, object] = {}
    for item in items or ():
        path, eq, text = item.partition("=")
        path = path.strip()
        if not eq or not path:
            raise ConfigError(f"--set {item!r}: expected PATH=VALUE, e.g. --set privacy.pseudo_count=0.5")
        if path not in fields_:
            near = [p for p in fields_ if p.rsplit(".", 1)[-1] == path.rsplit(".", 1)[-1]]
            hint = f" (did you mean {', '.join(near)}?)" if near else ""
            raise ConfigError(f"--set {path}: no such setting{hint}; the settings: "
                              f"{', '.join(p for p in sorted(fields_) if not _flagged(fields_[p]))}")
        if _flagged(fields_[path]):
            raise ConfigError(f"--set {path}: this setting has its own flag; use {flag_for(path, config_cls, settings)}")
        try:
            value = convert(kinds[path], text)
        except ValueError as err:
            raise ConfigError(f"--set {path}={text}: {path} takes {type_words(kinds[path])} ({err})") from None
        if path in out and out[path] != value:
            raise ConfigError(f"--set {path} is given twice ({out[path]!r} and {value!r}); give it once")
        allowed = _choices(fields_[path])
        values = value if isinstance(value, tuple) else (value,)
        if allowed and value is not None and any(v not in allowed for v in values):
            raise ConfigError(f"--set {path}={text}: must be {'' if isinstance(value, tuple) else 'one '}of "
                              f"{', '.join(allowed)}")
        out[path] = value
    return out


def _flagged(f: dataclasses.Field) -> bool:
    return bool(f.metadata.get("flag") or f.metadata.get("set_by"))


def settings_list(config_cls: type = TrainConfig, settings: Mapping[str, type] | None = None) -> str:
    """Every ``--set`` path with its type, default and help: what ``--set list`` prints."""
    kinds, lines = types(config_cls, settings), []
    for path, f in sorted(schema(config_cls, settings).items()):
        if _flagged(f):
            continue
        kind = getattr(kinds[path], "__name__", str(kinds[path]))
        help_ = f.metadata.get("help") or ""
        lines.append(f"  {path} ({kind}; default {_default_text(f)}){': ' + help_ if help_ else ''}")
    return "\n".join(["settings without a flag of their own (raptor train --set PATH=VALUE):", *lines])


def parse_layers(text: str) -> tuple[str | tuple[int, ...], int]:
    """``--layers`` as the config's (``layers``, ``num_auto_layers``): 'auto' (one layer), 'auto:K',
    'last', 'all' or comma-separated MoE layer indices."""
    default = TrainConfig.num_auto_layers
    if text in ("auto", "last", "all"):
        return text, default
    try:
        if text.startswith("auto:"):
            return "auto", int(text[len("auto:"):])
        return tuple(int(v) for v in text.split(",")), default
    except ValueError as err:
        raise ConfigError(f"--layers must be 'auto', 'auto:K' (K layers), 'last', 'all' or comma-separated MoE layer "
                          f"indices, got {text!r}") from err


def _config_changes(args: argparse.Namespace, config_cls: type) -> dict[str, object]:
    """``{dotted path: value}`` of the config flags given on the command line (None: not given);
    ``--layers``, ``--lora``/``--no-lora`` and ``--seed`` set two fields each."""
    changes: dict[str, object] = {}
    for path, f in schema(config_cls, {}).items():
        flag = f.metadata.get("flag")
        if not flag:
            continue
        dest = flag.lstrip("-").replace("-", "_")
        value = getattr(args, dest, None)
        if value is None:
            continue
        if path == "layers":
            changes["layers"], changes["num_auto_layers"] = parse_layers(value)
        elif path == "lora":  # dp-lora is LoRA by its method: the flag only sets its rank
            changes["lora"] = bool(value) and lora_rule(getattr(args, "method", None) or "raptor") != "always"
            if isinstance(value, int) and not isinstance(value, bool):
                changes["lora_rank"] = value
        elif path == "seed":
            changes["seed"], changes["privacy.secure_rng"] = value, False
        elif path == "privacy.epsilon" and not is_private(getattr(args, "method", None) or "raptor"):
            continue  # the nonprivate method has no epsilon
        else:
            changes[path] = value
    return changes


def resolve_train_args(args: argparse.Namespace, config_cls: type = TrainConfig,
                       settings: Mapping[str, type] | None = None) -> TrainConfig:
    """Complete ``args`` (each command setting an attribute: its flag's value, its ``--set`` value
    or its default; ``model.head_init`` label-words under a recipe) and return the run's config; a
    field's error names its flag (:func:`translate`)."""
    from raptor.recipes import RECIPES
    from raptor.training.config import default_train_config, replace_fields

    settings = SETTINGS if settings is None else settings
    try:
        sets = parse_sets(getattr(args, "set", None), config_cls, settings)
        for prefix, cls in settings.items():
            for name, (f, _) in leaf_fields(cls).items():
                path = f"{prefix}.{name}"
                if not _flagged(f):
                    setattr(args, name, sets.pop(path, f.default))
                elif not hasattr(args, name):
                    setattr(args, name, f.default)
        if getattr(args, "head_init", None) is None:
            args.head_init = "label-words" if args.recipe and args.objective == "classify" else "random"
        changes = _config_changes(args, config_cls)
        method = changes.get("method", config_cls.method)
        if args.recipe:
            base = RECIPES[args.recipe](method)
        else:
            base = default_train_config(method, args.model, lora=changes.get("lora"))
        if type(base) is not config_cls:  # a config class that extends TrainConfig with fields of its own
            base = config_cls(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)})
        config = replace_fields(base, {**changes, **sets})
        lora_only = sorted(p for p in sets if p in ("lora_alpha", "lora_dropout"))
        if lora_only and not config.lora and lora_rule(config.method) != "always":
            raise ConfigError(f"--set {lora_only[0]}: this run trains without LoRA (--no-lora, or the method's or "
                              "model's default), so it would have no effect; drop it, or pass --lora")
    except ConfigError as err:
        raise translate(err, config_cls) from None
    args.flag_names = {name: flag_for(f"{prefix}.{name}", config_cls, settings)
                       for prefix, cls in settings.items() for name in leaf_fields(cls)}
    # the fields set by a flag, --set or a recipe (the others were left to the library's default rules)
    args.given = frozenset(schema(config_cls, {})) if args.recipe else frozenset(changes) | frozenset(sets)
    for path, f in schema(config_cls, {}).items():  # the command reads the run's values by flag name
        if f.metadata.get("flag"):
            value = config
            for part in path.split("."):
                value = getattr(value, part)
            setattr(args, f.metadata["flag"].lstrip("-").replace("-", "_"), value)
    return config
