"""Sparse upcycling (Komatsuzaki et al., 2023): a dense BERT checkpoint becomes a ``bert_moe`` MoE.

:func:`upcycle_model` copies every weight of the dense encoder (but the key bias, which softmax
ignores: it shifts all of a query's scores alike) and turns the chosen feed-forward blocks
into ``num_experts`` copies of the dense FFN behind a top-1 router (:mod:`raptor.moe.bert_moe`).
At initialisation the MoE model computes exactly the dense function: every token goes to one
expert, each expert equals the dense FFN, and the expert output is scaled by
``p / stop_grad(p)`` = 1 (docs/METHOD.md, "Upcycling").

Routers: ``"kmeans"`` (the default) places the router of each MoE layer at balanced k-means
centroids of that layer's FFN inputs on PUBLIC text, so that a token's expert, and a record's
owner, reflect what the token is; ``"random"`` draws the router from the generator. Either way the
routing does not change the function at initialisation (the experts are copies); it decides which
records' gradients each expert receives once fine-tuning starts. The report gives each layer's
routing entropy on the public text (what ``--layers auto`` reads).

Privacy: reads the dense weights and the public texts it is given, nothing else; k-means
initialisation and the random router draw from the explicit generator.

Legend: N tokens, D hidden, E experts, F FFN width.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from raptor.errors import ConfigError
from raptor.moe.bert_moe import BertMoeConfig, BertMoeForSequenceClassification, BertMoeSparseBlock

ROUTER_INITS = ("kmeans", "random")
#: dense BERT config fields carried over to the MoE config
_BERT_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "hidden_act", "max_position_embeddings", "type_vocab_size", "layer_norm_eps", "pad_token_id",
                "initializer_range")


@dataclass(frozen=True)
class UpcycleSpec:
    """What to upcycle: ``layers`` is ``"all"``, ``"every-other"`` (1, 3, 5, ...: the later of each
    pair, as GShard/Switch place their MoE layers) or explicit block indices."""

    num_experts: int = 4
    layers: str | tuple[int, ...] = "all"
    router: str = "kmeans"
    kmeans_iters: int = 25
    max_public_tokens: int = 50_000

    def __post_init__(self) -> None:
        if isinstance(self.num_experts, bool) or not isinstance(self.num_experts, int) or not 2 <= self.num_experts <= 256:
            raise ConfigError(f"--experts must be an integer in [2, 256], got {self.num_experts!r}")
        if self.router not in ROUTER_INITS:
            raise ConfigError(f"--router must be one of {', '.join(ROUTER_INITS)}, got {self.router!r}")
        if isinstance(self.layers, str) and self.layers not in ("all", "every-other"):
            raise ConfigError(f"--moe-layers must be 'all', 'every-other' or comma-separated block indices, "
                              f"got {self.layers!r}")

    def layer_indices(self, num_layers: int) -> list[int]:
        if self.layers == "all":
            return list(range(num_layers))
        if self.layers == "every-other":
            return list(range(1, num_layers, 2))
        out = sorted({int(i) for i in self.layers})
        bad = [i for i in out if not 0 <= i < num_layers]
        if bad or not out:
            raise ConfigError(f"--moe-layers {list(self.layers)}: the model has blocks 0..{num_layers - 1}")
        return out


def parse_layers(text: str) -> str | tuple[int, ...]:
    """``--moe-layers`` as given on the command line: ``all``, ``every-other`` or ``0,2,5``."""
    if text in ("all", "every-other"):
        return text
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"--moe-layers must be 'all', 'every-other' or comma-separated block indices, "
                          f"got {text!r}") from None


def moe_config(dense_config: dict, spec: UpcycleSpec, *, num_labels: int = 2, source: str | None = None) -> BertMoeConfig:
    """The ``bert_moe`` config of a dense BERT config (a ``config.json`` dict)."""
    if dense_config.get("model_type") not in ("bert", None):
        raise ConfigError(f"upcycling supports BERT-family encoders (model_type 'bert'), got "
                          f"{dense_config.get('model_type')!r}")
    fields = {k: dense_config[k] for k in _BERT_FIELDS if k in dense_config}
    fields["layer_norm_eps"] = float(fields.get("layer_norm_eps", 1e-12))
    layers = spec.layer_indices(int(fields.get("num_hidden_layers", 12)))
    config = BertMoeConfig(**fields, num_experts=spec.num_experts, moe_layers=layers, upcycled_from=source,
                           num_labels=num_labels)
    return config


def _dense_key_map(config: BertMoeConfig) -> dict[str, str]:
    """bert_moe parameter name -> dense BERT name, for every parameter but the experts, routers and head."""
    m = {
        "bert.embeddings.word_embeddings.weight": "embeddings.word_embeddings.weight",
        "bert.embeddings.position_embeddings.weight": "embeddings.position_embeddings.weight",
        "bert.embeddings.token_type_embeddings.weight": "embeddings.token_type_embeddings.weight",
        "bert.embeddings.norm.weight": "embeddings.LayerNorm.weight",
        "bert.embeddings.norm.bias": "embeddings.LayerNorm.bias",
    }
    for i in range(config.num_hidden_layers):
        ours, theirs = f"bert.layers.{i}", f"encoder.layer.{i}"
        for a, b in (("q_proj", "attention.self.query"), ("k_proj", "attention.self.key"),
                     ("v_proj", "attention.self.value"), ("o_proj", "attention.output.dense")):
            for leaf in ("weight", "bias") if a != "k_proj" else ("weight",):  # the key bias is dropped
                m[f"{ours}.attention.{a}.{leaf}"] = f"{theirs}.{b}.{leaf}"
        for leaf in ("weight", "bias"):
            m[f"{ours}.attention.norm.{leaf}"] = f"{theirs}.attention.output.LayerNorm.{leaf}"
            m[f"{ours}.mlp_norm.{leaf}"] = f"{theirs}.output.LayerNorm.{leaf}"
            if i not in config.moe_layers:
                m[f"{ours}.mlp.fc1.{leaf}"] = f"{theirs}.intermediate.dense.{leaf}"
                m[f"{ours}.mlp.fc2.{leaf}"] = f"{theirs}.output.dense.{leaf}"
    return m


def _strip_prefix(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Accept ``bert.``-prefixed keys (a BertFor* checkpoint) as well as a bare BertModel's."""
    if any(k.startswith("bert.") for k in state):
        return {k[5:]: v for k, v in state.items() if k.startswith("bert.")}
    return state


@torch.no_grad()
def load_dense_into(model: BertMoeForSequenceClassification, dense_state: dict[str, torch.Tensor]) -> None:
    """Copy a dense BERT state dict into ``model``: shared weights by name, each MoE layer's experts
    as copies of that layer's dense FFN. Raises if a needed weight is missing or mis-shaped."""
    state = _strip_prefix(dense_state)
    params = dict(model.named_parameters())
    config = model.config

    def take(name: str) -> torch.Tensor:
        if name not in state:
            raise ConfigError(f"the dense checkpoint has no {name!r}: is it a BERT encoder?")
        return state[name].float()

    for ours, theirs in _dense_key_map(config).items():
        value = take(theirs)
        if params[ours].shape != value.shape:
            raise ConfigError(f"{theirs}: shape {tuple(value.shape)} in the checkpoint, {tuple(params[ours].shape)} "
                              "in the MoE model")
        params[ours].copy_(value)
    for i in config.moe_layers:
        layer = f"encoder.layer.{i}"
        w1, b1 = take(f"{layer}.intermediate.dense.weight"), take(f"{layer}.intermediate.dense.bias")
        w2, b2 = take(f"{layer}.output.dense.weight"), take(f"{layer}.output.dense.bias")
        block = model.bert.layers[i].mlp
        for e in range(config.num_experts):
            expert = block.experts[f"expert_{e}"]
            expert.wi.weight.copy_(w1)
            expert.wi_bias.copy_(b1.unsqueeze(1))
            expert.wo.weight.copy_(w2)
            expert.wo_bias.copy_(b2.unsqueeze(1))


def moe_blocks(model: nn.Module) -> dict[int, BertMoeSparseBlock]:
    return {i: layer.mlp for i, layer in enumerate(model.bert.layers) if isinstance(layer.mlp, BertMoeSparseBlock)}


#: what :func:`collect_block_inputs` counts toward its token cap
TOKEN_COUNTS = ("attended", "selected")


@torch.no_grad()
def collect_block_inputs(blocks: Mapping[int, nn.Module], forward: Callable[[torch.Tensor, torch.Tensor], object],
                         batches: Sequence[tuple[torch.Tensor, torch.Tensor]], max_tokens: int,
                         exclude_ids: Sequence[int] = (), *, count: str, width: int | None = None
                         ) -> dict[int, torch.Tensor]:
    """The input rows ``[N, D]`` (float32) of each module in ``blocks`` (block index -> module: an
    FFN / MLP) on the (public) batches' real tokens: those with attention mask 1 and an id not in
    ``exclude_ids`` (special tokens).

    ``forward(ids, mask)`` runs the model over one ``(input_ids, attention_mask)`` batch; a forward
    pre-hook on each block records its input rows of the real tokens. Batches are read until the
    running count reaches ``max_tokens``, where ``count`` says what is counted: ``"attended"``,
    every token with mask 1 (excluded ids included: reading stops earlier), or ``"selected"``, the
    real tokens collected. Each block's rows are then cut at ``max_tokens``. With no batch read, a
    block gives ``zeros(0)`` (``width`` None) or ``zeros(0, width)``.
    """
    if count not in TOKEN_COUNTS:
        raise ValueError(f"count must be one of {', '.join(TOKEN_COUNTS)}, got {count!r}")
    got: dict[int, list[torch.Tensor]] = {i: [] for i in blocks}
    current: dict[str, torch.Tensor] = {}

    def hook(index):
        def fn(module, args):
            got[index].append(args[0][current["mask"]].detach().float())
        return fn

    handles = [b.register_forward_pre_hook(hook(i)) for i, b in blocks.items()]
    try:
        seen = 0
        excluded = torch.tensor(sorted(set(exclude_ids)), dtype=torch.long)
        for ids, mask in batches:
            current["mask"] = mask.bool() & ~torch.isin(ids, excluded.to(ids.device))
            forward(ids, mask)
            seen += int(mask.sum()) if count == "attended" else int(current["mask"].sum())
            if seen >= max_tokens:
                break
    finally:
        for h in handles:
            h.remove()
    empty = (0,) if width is None else (0, width)
    device = {i: next((p.device for p in b.parameters()), torch.device("cpu")) for i, b in blocks.items()}
    return {i: torch.cat(v)[:max_tokens] if v else torch.zeros(empty, device=device[i]) for i, v in got.items()}


@torch.no_grad()
def ffn_inputs(model: nn.Module, batches: Sequence[tuple[torch.Tensor, torch.Tensor]], max_tokens: int,
               exclude_ids: Sequence[int] = ()) -> dict[int, torch.Tensor]:
    """Each MoE layer's FFN input rows ``[N, D]`` on the (public) batches' non-pad tokens, less the
    tokens in ``exclude_ids`` (special tokens: every ``[CLS]`` has nearly the same state, a tight
    cluster that would take a centroid of its own and that no offset can balance). The cap counts
    every non-pad token read (``count="attended"`` of :func:`collect_block_inputs`)."""
    return collect_block_inputs(moe_blocks(model), lambda ids, mask: model.bert(ids, mask), batches, max_tokens,
                                exclude_ids, count="attended")


def balanced_kmeans(x_ND: torch.Tensor, k: int, generator: torch.Generator, iters: int = 25
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """k-means (k-means++ seeding from ``generator``, Lloyd steps), then per-centroid offsets that
    balance the assignment: returns ``(centroids [k, D], offsets [k])`` with the nearest-centroid rule
    ``argmax_e 2 x.c_e - |c_e|^2 + offset_e`` giving each centroid about ``N / k`` rows."""
    N = x_ND.shape[0]
    if N < k:
        raise ConfigError(f"router k-means needs at least {k} public tokens, got {N}: give more public text")
    x = x_ND.float()
    first = int(torch.randint(N, (1,), generator=generator))
    centroids = [x[first]]
    d2 = (x - x[first]).pow(2).sum(1)
    for _ in range(1, k):
        probs = d2 / d2.sum() if float(d2.sum()) > 0 else torch.full_like(d2, 1.0 / N)
        nxt = int(torch.multinomial(probs.float(), 1, generator=generator))
        centroids.append(x[nxt])
        d2 = torch.minimum(d2, (x - x[nxt]).pow(2).sum(1))
    c = torch.stack(centroids)
    for _ in range(iters):
        assign = (2 * x @ c.t() - c.pow(2).sum(1)).argmax(1)
        for e in range(k):
            rows = x[assign == e]
            if rows.shape[0]:
                c[e] = rows.mean(0)
    return c.float(), balance_offsets(2 * x @ c.t() - c.pow(2).sum(1)).float()


def balance_offsets(score_NK: torch.Tensor, iters: int = 300, tolerance: float = 0.01) -> torch.Tensor:
    """Offsets ``[k]`` added to the scores so that ``argmax`` gives each column about ``N / k`` rows:
    steps against each column's excess share, shrunk whenever the worst imbalance stops improving;
    the best offsets seen are returned."""
    N, k = score_NK.shape
    offsets = torch.zeros(k, dtype=torch.float64)
    step = float((score_NK.max(1).values - score_NK.median(1).values).median()) or 1.0
    best_err, best = math.inf, offsets.clone()
    for _ in range(iters):
        share = torch.bincount((score_NK + offsets).argmax(1), minlength=k).double() / N
        err = float((share - 1.0 / k).abs().max())
        if err < best_err:
            best_err, best = err, offsets.clone()
        else:
            step *= 0.7
        if err < tolerance:
            break
        offsets -= step * (share - 1.0 / k) * k
    return best


def entropy(shares: torch.Tensor) -> float:
    p = shares[shares > 0].double()
    return float(-(p * p.log()).sum())


@torch.no_grad()
def init_routers(model: nn.Module, inputs: dict[int, torch.Tensor], spec: UpcycleSpec,
                 generator: torch.Generator) -> dict[str, dict]:
    """Set every MoE layer's router (k-means on ``inputs`` or random) and report, per layer, the
    token shares of each expert and their entropy (in nats; the maximum is ``log E``)."""
    report: dict[str, dict] = {}
    for index, block in moe_blocks(model).items():
        lin = block.router.classifier
        x = inputs.get(index)
        if spec.router == "kmeans":
            c, off = balanced_kmeans(x, spec.num_experts, generator, spec.kmeans_iters)
            lin.weight.copy_(2 * c)
            lin.bias.copy_(off - c.pow(2).sum(1))
        else:
            lin.weight.copy_(torch.randn(lin.weight.shape, generator=generator) * lin.weight.shape[1] ** -0.5)
            lin.bias.zero_()
        entry: dict = {"router": spec.router}
        if x is not None and x.shape[0]:
            logits = lin(x)
            shares = torch.bincount(logits.argmax(1), minlength=spec.num_experts).double() / x.shape[0]
            probs = logits.double().softmax(1)
            entry.update(tokens=int(x.shape[0]), expert_shares=[round(float(s), 4) for s in shares],
                         load_entropy=round(entropy(shares), 4), max_entropy=round(math.log(spec.num_experts), 4),
                         mean_token_entropy=round(float(-(probs * probs.clamp_min(1e-300).log()).sum(1).mean()), 4))
        report[str(index)] = entry
    return report


def upcycle_model(dense_config: dict, dense_state: dict[str, torch.Tensor], spec: UpcycleSpec, *,
            public_batches: Sequence[tuple[torch.Tensor, torch.Tensor]] = (), generator: torch.Generator,
            num_labels: int = 2, source: str | None = None, exclude_ids: Sequence[int] = ()) -> tuple[BertMoeForSequenceClassification, dict]:
    """The upcycled classification model (its head: normal(0, 0.02) rows from ``generator``, zero bias)
    and a report (settings, per-layer routing on the public batches).

    ``public_batches``: ``(input_ids, attention_mask)`` pairs of PUBLIC text, required by the
    k-means router (the caller vouches that they are public: privacy rule 2); ``exclude_ids``:
    token ids left out of the k-means (the tokenizer's special tokens).
    """
    config = moe_config(dense_config, spec, num_labels=num_labels, source=source)
    with torch.random.fork_rng(devices=[]):  # constructor draws are overwritten below
        model = BertMoeForSequenceClassification(config)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        load_dense_into(model, dense_state)
        model.classifier.weight.copy_(torch.randn(model.classifier.weight.shape, generator=generator) * 0.02)
    model.eval()
    if spec.router == "kmeans" and not public_batches:
        raise ConfigError("the k-means router needs public text: pass --public-file (or use --router random)")
    inputs = ffn_inputs(model, public_batches, spec.max_public_tokens, exclude_ids) if public_batches else {}
    routing = init_routers(model, inputs, spec, generator)
    report = {"spec": {**asdict(spec), "layers": spec.layers if isinstance(spec.layers, str) else list(spec.layers)},
              "moe_layers": list(config.moe_layers), "source": source, "routing": routing}
    return model, report


def read_dense(path: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config dict, state dict) of a dense Hugging Face checkpoint directory (safetensors)."""
    import json

    from safetensors.torch import load_file

    config_file, weights = path / "config.json", path / "model.safetensors"
    if not config_file.is_file() or not weights.is_file():
        raise ConfigError(f"{path} is not a dense checkpoint: it needs config.json and model.safetensors")
    return json.loads(config_file.read_text()), load_file(str(weights))
