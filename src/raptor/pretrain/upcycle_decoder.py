"""Sparse upcycling of dense DECODER checkpoints into MoE families transformers already has.

:func:`upcycle_decoder` maps

* Llama / Mistral -> Mixtral (``MixtralForCausalLM`` / ``MixtralForSequenceClassification``),
* Qwen2 -> Qwen2-MoE (``Qwen2MoeForCausalLM`` / ``Qwen2MoeForSequenceClassification``),

exactly at initialisation: the MoE model computes the dense model's function (up to float
rounding in the top-k weighted sum). :func:`upcycle_family` says which target a dense
``model_type`` maps to.

How the routing keeps the dense function: each upcycled MLP (gate_proj, up_proj, down_proj and
the activation) becomes ``num_experts`` identical experts in the family's fused layout
(``experts.gate_up_proj [E, 2F, D]`` = ``cat(gate_proj, up_proj)``, ``experts.down_proj [E, D, F]``)
behind a top-k router. Both families renormalise the top-k softmax weights to sum to 1 (Mixtral
always; Qwen2-MoE with ``norm_topk_prob=True``, which this module sets), so whichever k experts a
token picks, their weighted sum is the dense MLP's output. Attention (with Qwen2's q/k/v biases),
RoPE, RMSNorm eps, embeddings and the LM head map 1:1.

Qwen2-MoE always has a shared expert behind a sigmoid gate. ``shared_expert="zero"`` (the default)
gives it copies of the dense gate_proj / up_proj, a ZERO down_proj and a zero gate weight: its
output is exactly 0 at initialisation, the routed experts alone carry the dense MLP, and the shared
expert learns from there (its down_proj gets gradient at once; its gate starts at sigmoid(0) = 1/2).
``shared_expert="split"`` instead copies the whole dense MLP into the shared expert and halves every
routed expert's down_proj: the zero gate weight gives sigmoid(0) = 1/2 exactly, so the layer's output
is MLP/2 (shared) + MLP/2 (routed), again the dense function (up to rounding), with the dense
knowledge in both groups from the start.

Layers: ``"all"``, ``"every-other"`` (1, 3, 5, ...) or block indices. Qwen2-MoE keeps the other
blocks as dense MLPs (``mlp_only_layers``, ``decoder_sparse_step=1``). Mixtral has no dense blocks in
transformers (every decoder layer builds a ``MixtralSparseMoeBlock``), so Mixtral takes ``"all"``
only and anything else is refused.

Routers (``gate.weight [E, D]``, no bias in either family):

* ``"random"``: normal rows with std ``D**-0.5`` (row norm about 1), drawn from the explicit
  ``generator`` (never the global RNG);
* ``"kmeans"``: spherical k-means of that layer's MLP inputs on PUBLIC tokens (k-means++ seeding from
  ``generator``); the router rows are the unit centroid directions. A token's logits are
  ``|x| cos(x, c_e)``, and ``|x|`` is common to all of one token's logits, so its top-k experts are
  exactly its k nearest centroid directions. (A bias-free gate cannot express the Euclidean
  nearest-centroid rule ``2 x.c - |c|^2 + offset`` of :mod:`raptor.pretrain.upcycle`, and no
  balancing offsets can be set, so the report gives the resulting shares.)

Either way the routing does not change the function at initialisation (the experts are copies); it
decides which records' gradients each expert receives once fine-tuning starts.

Refused, with one :class:`~raptor.errors.ConfigError` line each (they cannot map exactly): other
model types; Llama ``attention_bias=True`` or ``mlp_bias=True`` (Mixtral has neither bias); Qwen2
sliding-window attention (``use_sliding_window=True`` or sliding ``layer_types``: Qwen2-MoE lays out
its sliding layers differently); a RoPE setting whose frequencies differ in the target family
(checked on the built rotary embeddings); Mixtral with some layers left dense; weights in the dense
checkpoint that have no place in the MoE model.

Private-training safety: the produced configs set ``router_aux_loss_coef=0``,
``output_router_logits=False`` and (Mixtral) ``router_jitter_noise=0`` (raptor's adapters enforce
the same at training time).

Privacy: reads the dense weights and, for ``router="kmeans"``, the public inputs it is given; random
draws come from the explicit generator only (model construction runs inside ``fork_rng``).

Legend: N tokens, D hidden, E experts, F MLP width, L blocks.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from raptor.errors import ConfigError
from raptor.pretrain.upcycle import UpcycleSpec, collect_block_inputs, entropy

#: dense ``model_type`` -> the MoE family it upcycles into
UPCYCLE_TARGETS = {"llama": "mixtral", "mistral": "mixtral", "qwen2": "qwen2_moe"}
DECODER_ROUTER_INITS = ("random", "kmeans")
SHARED_EXPERT_INITS = ("zero", "split")
HEADS = ("causal_lm", "classification")
#: transformers class-name prefixes of the dense and target families
_PREFIX = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "mixtral": "Mixtral", "qwen2_moe": "Qwen2Moe"}
#: dense config fields carried over 1:1 (when the dense config has them)
_COMMON_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "hidden_act", "max_position_embeddings", "initializer_range",
                  "rms_norm_eps", "use_cache", "pad_token_id", "bos_token_id", "eos_token_id", "tie_word_embeddings",
                  "attention_dropout")


def upcycle_family(model_type: str) -> str:
    """The MoE family (``model_type``) a dense decoder ``model_type`` upcycles into:
    llama / mistral -> ``"mixtral"``, qwen2 -> ``"qwen2_moe"``."""
    target = UPCYCLE_TARGETS.get(model_type)
    if target is None:
        hint = " (BERT encoders: raptor.pretrain.upcycle)" if model_type == "bert" else ""
        raise ConfigError(f"decoder upcycling supports model_type {', '.join(sorted(UPCYCLE_TARGETS))}, got "
                          f"{model_type!r}{hint}")
    return target


@dataclass(frozen=True)
class DecoderUpcycleSpec:
    """What to upcycle; ``layers`` as in :class:`raptor.pretrain.upcycle.UpcycleSpec`."""

    num_experts: int = 4
    top_k: int = 2
    layers: str | tuple[int, ...] = "all"
    router: str = "random"
    shared_expert: str = "zero"
    kmeans_iters: int = 25
    max_public_tokens: int = 50_000

    def __post_init__(self) -> None:
        UpcycleSpec(num_experts=self.num_experts, layers=self.layers)  # validates experts and layers
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or not 1 <= self.top_k <= self.num_experts:
            raise ConfigError(f"top_k must be an integer in [1, num_experts={self.num_experts}], got {self.top_k!r}")
        if self.router not in DECODER_ROUTER_INITS:
            raise ConfigError(f"router must be one of {', '.join(DECODER_ROUTER_INITS)}, got {self.router!r}")
        if self.shared_expert not in SHARED_EXPERT_INITS:
            raise ConfigError(f"shared_expert must be one of {', '.join(SHARED_EXPERT_INITS)}, "
                              f"got {self.shared_expert!r}")

    def layer_indices(self, num_layers: int) -> list[int]:
        return UpcycleSpec(num_experts=self.num_experts, layers=self.layers).layer_indices(num_layers)


# ----------------------------------------------------------------------------------------- inputs


def _dense_config(config) -> object:
    """A transformers config object from a config object or a ``config.json`` dict."""
    if isinstance(config, Mapping):
        import transformers

        fields = dict(config)
        model_type = fields.pop("model_type", None)
        upcycle_family(model_type)
        for key in ("architectures", "transformers_version", "torch_dtype", "dtype"):
            fields.pop(key, None)
        return transformers.AutoConfig.for_model(model_type, **fields)
    return config


def _dense_parts(dense) -> tuple[object, dict[str, torch.Tensor]]:
    """(config, state dict with ``model.``-prefixed backbone keys) of a dense model or a
    ``(config, state_dict)`` pair."""
    if isinstance(dense, nn.Module):
        if getattr(dense, "config", None) is None:
            raise ConfigError("the dense model has no Hugging Face config: pass a transformers model or "
                              "(config, state_dict)")
        config, state = dense.config, dense.state_dict()
    elif isinstance(dense, (tuple, list)) and len(dense) == 2:
        config, state = _dense_config(dense[0]), dict(dense[1])
    else:
        raise ConfigError("upcycle_decoder takes a dense transformers model or a (config, state_dict) pair")
    upcycle_family(getattr(config, "model_type", None))
    heads = ("lm_head.", "score.")
    if not any(k.startswith("model.") for k in state):  # a bare LlamaModel / Qwen2Model
        state = {(k if k.startswith(heads) else f"model.{k}"): v for k, v in state.items()}
    return config, state


# ----------------------------------------------------------------------------------------- config


def _refuse_inexact(dense) -> None:
    mt = dense.model_type
    if mt == "llama":
        if getattr(dense, "attention_bias", False):
            raise ConfigError("the Llama checkpoint has attention_bias=True; Mixtral attention has no biases, "
                              "so it cannot be upcycled exactly: use a checkpoint without attention biases")
        if getattr(dense, "mlp_bias", False):
            raise ConfigError("the Llama checkpoint has mlp_bias=True; Mixtral experts have no biases, "
                              "so it cannot be upcycled exactly: use a checkpoint without MLP biases")
    if mt == "qwen2":
        layer_types = list(getattr(dense, "layer_types", None) or ())
        if getattr(dense, "use_sliding_window", False) or any(t != "full_attention" for t in layer_types):
            raise ConfigError("the Qwen2 checkpoint uses sliding-window attention, which Qwen2-MoE lays out "
                              "differently: upcycle a checkpoint with use_sliding_window=false")


def moe_decoder_config(dense_config, spec: DecoderUpcycleSpec, *, head: str = "causal_lm", num_labels: int = 2):
    """The MoE config (``MixtralConfig`` or ``Qwen2MoeConfig``) of a dense decoder config (a
    transformers config or a ``config.json`` dict); raises :class:`ConfigError` for what cannot map
    exactly."""
    import transformers

    dense = _dense_config(dense_config)
    target = upcycle_family(dense.model_type)
    if head not in HEADS:
        raise ConfigError(f"head must be one of {', '.join(HEADS)}, got {head!r}")
    _refuse_inexact(dense)
    L = int(dense.num_hidden_layers)
    layers = spec.layer_indices(L)
    fields = {k: getattr(dense, k) for k in _COMMON_FIELDS if hasattr(dense, k)}
    fields["rope_parameters"] = dict(dense.rope_parameters or {})
    if getattr(dense, "head_dim", None):
        fields["head_dim"] = int(dense.head_dim)
    fields.update(num_experts_per_tok=spec.top_k, router_aux_loss_coef=0.0, output_router_logits=False)
    if head == "classification":
        fields["num_labels"] = num_labels
        if num_labels == 1:
            fields["problem_type"] = "regression"
    if target == "mixtral":
        if layers != list(range(L)):
            raise ConfigError(f"Mixtral has no dense blocks, so a {dense.model_type} checkpoint upcycles with "
                              f"layers='all' only (got {spec.layers!r}); for a partial upcycle use Qwen2 -> Qwen2-MoE")
        fields.update(num_local_experts=spec.num_experts, router_jitter_noise=0.0,
                      sliding_window=getattr(dense, "sliding_window", None) if dense.model_type == "mistral" else None)
        return transformers.MixtralConfig(**fields)
    F = int(dense.intermediate_size)
    fields.update(num_experts=spec.num_experts, moe_intermediate_size=F, shared_expert_intermediate_size=F,
                  norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[i for i in range(L) if i not in layers],
                  qkv_bias=True, use_sliding_window=False, layer_types=["full_attention"] * L,
                  max_window_layers=getattr(dense, "max_window_layers", L))
    return transformers.Qwen2MoeConfig(**fields)


def _model_class(target: str, head: str):
    import transformers

    return getattr(transformers, _PREFIX[target] + ("ForCausalLM" if head == "causal_lm" else "ForSequenceClassification"))


def _check_rope(dense_config, model: nn.Module) -> None:
    """Refuse when the target family's rotary embedding differs from the dense family's."""
    mt = dense_config.model_type
    module = importlib.import_module(f"transformers.models.{mt}.modeling_{mt}")
    with torch.random.fork_rng(devices=[]):
        ref = getattr(module, _PREFIX[mt] + "RotaryEmbedding")(config=dense_config)
    ours = model.model.rotary_emb
    same = (ref.inv_freq.shape == ours.inv_freq.shape and torch.equal(ref.inv_freq.float(), ours.inv_freq.float())
            and float(ref.attention_scaling) == float(ours.attention_scaling))
    if not same:
        raise ConfigError(f"rope_parameters {dict(dense_config.rope_parameters or {})} give other rotary frequencies "
                          f"in {model.config.model_type} than in {mt}: use a checkpoint with default RoPE")


# ----------------------------------------------------------------------------------------- weights


def _moe_block_names(model: nn.Module) -> dict[int, str]:
    """Block index -> module name of each sparse MoE block (the MLP of that block)."""
    return {i: f"model.layers.{i}.mlp" for i, layer in enumerate(model.model.layers) if hasattr(layer.mlp, "gate")}


@torch.no_grad()
def load_dense_decoder(model: nn.Module, dense_state: Mapping[str, torch.Tensor], spec: DecoderUpcycleSpec,
                       generator: torch.Generator) -> dict:
    """Copy the dense state into ``model`` (everything but the routers): shared weights by name,
    each MoE block's experts (and Qwen2-MoE's shared expert, per ``spec.shared_expert``) from that
    block's dense MLP; a classification head the dense state lacks is drawn from ``generator``
    (normal(0, 0.02)). Raises :class:`ConfigError` when a dense weight is missing, mis-shaped or has
    no place in the MoE model. Returns ``{"new": [...], "dropped": [...]}`` parameter names."""
    params = dict(model.named_parameters())
    written: set[str] = set()
    used: set[str] = set()
    tied = bool(getattr(model.config, "tie_word_embeddings", False))

    def take(name: str) -> torch.Tensor:
        if name not in dense_state:
            raise ConfigError(f"the dense checkpoint has no {name!r}: is it a {model.config.model_type} source "
                              "(llama, mistral or qwen2) saved whole?")
        used.add(name)
        return dense_state[name]

    def put(name: str, value: torch.Tensor) -> None:
        p = params[name]
        if tuple(p.shape) != tuple(value.shape):
            raise ConfigError(f"{name}: shape {tuple(value.shape)} from the dense checkpoint, {tuple(p.shape)} in the "
                              "MoE model")
        p.copy_(value.to(p.dtype))
        written.add(name)

    E = spec.num_experts
    for prefix in _moe_block_names(model).values():
        gate, up, down = (take(f"{prefix}.{n}_proj.weight") for n in ("gate", "up", "down"))
        routed_down = down * 0.5 if spec.shared_expert == "split" and hasattr(model.get_submodule(prefix),
                                                                              "shared_expert") else down
        put(f"{prefix}.experts.gate_up_proj", torch.cat([gate, up], 0).unsqueeze(0).expand(E, -1, -1))
        put(f"{prefix}.experts.down_proj", routed_down.unsqueeze(0).expand(E, -1, -1))
        written.add(f"{prefix}.gate.weight")  # set by init_decoder_routers
        if f"{prefix}.shared_expert_gate.weight" in params:
            put(f"{prefix}.shared_expert.gate_proj.weight", gate)
            put(f"{prefix}.shared_expert.up_proj.weight", up)
            put(f"{prefix}.shared_expert.down_proj.weight", down if spec.shared_expert == "split" else torch.zeros_like(down))
            put(f"{prefix}.shared_expert_gate.weight", torch.zeros_like(params[f"{prefix}.shared_expert_gate.weight"]))
    new = []
    for name in params:
        if name in written:
            continue
        if name == "score.weight" and (name not in dense_state or dense_state[name].shape != params[name].shape):
            put(name, torch.randn(params[name].shape, generator=generator) * 0.02)
            new.append(name)
            continue
        put(name, take(name))
    # a tied lm_head is the embedding (named_parameters lists it once)
    ignorable = {"lm_head.weight"} if (tied or "lm_head.weight" not in params) else set()
    ignorable |= {"score.weight"} if "score.weight" in new or "score.weight" not in params else set()
    left = sorted(k for k in dense_state if k not in used and k not in ignorable and not k.endswith("inv_freq"))
    if left:
        shown = ", ".join(left[:4]) + (f" (+{len(left) - 4} more)" if len(left) > 4 else "")
        raise ConfigError(f"the dense checkpoint has weights with no place in {model.config.model_type}: {shown}; "
                          "they cannot be upcycled exactly")
    dropped = sorted(k for k in dense_state if k in ignorable and not (tied and k == "lm_head.weight"))
    return {"new": new, "dropped": dropped}


# ----------------------------------------------------------------------------------------- routers


@torch.no_grad()
def mlp_inputs(model: nn.Module, batches: Sequence[tuple[torch.Tensor, torch.Tensor]], max_tokens: int,
               exclude_ids: Sequence[int] = ()) -> dict[int, torch.Tensor]:
    """Each MoE block's MLP input rows ``[N, D]`` (the post-attention RMSNorm output) on the (public)
    batches' non-pad tokens, less the tokens in ``exclude_ids``. The cap counts the rows collected
    (``count="selected"`` of :func:`~raptor.pretrain.upcycle.collect_block_inputs`)."""
    blocks = {i: model.get_submodule(name) for i, name in _moe_block_names(model).items()}
    return collect_block_inputs(blocks, lambda ids, mask: model.model(input_ids=ids, attention_mask=mask), batches,
                                max_tokens, exclude_ids, count="selected", width=model.config.hidden_size)


def spherical_kmeans(x_ND: torch.Tensor, k: int, generator: torch.Generator, iters: int = 25) -> torch.Tensor:
    """Unit centroid directions ``[k, D]`` of the rows of ``x_ND`` (spherical k-means: rows scaled to
    unit length, assignment by largest cosine, k-means++ seeding on ``1 - cos`` from ``generator``)."""
    x = x_ND.double()
    norms = x.norm(dim=1)
    u = x[norms > 0] / norms[norms > 0, None]
    N = u.shape[0]
    if N < k:
        raise ConfigError(f"router k-means needs at least {k} public tokens, got {N}: give more public text")
    first = int(torch.randint(N, (1,), generator=generator))
    centroids = [u[first]]
    dist = (1 - u @ u[first]).clamp_min(0)
    for _ in range(1, k):
        total = float(dist.sum())
        probs = dist / total if total > 0 else torch.full_like(dist, 1.0 / N)
        nxt = int(torch.multinomial(probs, 1, generator=generator))
        centroids.append(u[nxt])
        dist = torch.minimum(dist, (1 - u @ u[nxt]).clamp_min(0))
    c = torch.stack(centroids)
    for _ in range(iters):
        assign = (u @ c.t()).argmax(1)
        for e in range(k):
            s = u[assign == e].sum(0)
            if float(s.norm()) > 0:
                c[e] = s / s.norm()
    return c.float()


@torch.no_grad()
def init_decoder_routers(model: nn.Module, spec: DecoderUpcycleSpec, generator: torch.Generator,
                         inputs: Mapping[int, torch.Tensor] | None = None) -> dict[str, dict]:
    """Set every MoE block's ``gate.weight`` (random, or spherical k-means directions of ``inputs``)
    and report, per block, the share of the top-k slots each expert takes on ``inputs`` and its
    entropy (nats; the maximum is ``log E``)."""
    report: dict[str, dict] = {}
    inputs = inputs or {}
    for index, name in _moe_block_names(model).items():
        weight = model.get_submodule(name).gate.weight
        x = inputs.get(index)
        if spec.router == "kmeans":
            if x is None or x.shape[0] == 0:
                raise ConfigError(f"the k-means router needs public MLP inputs for block {index}")
            weight.copy_(spherical_kmeans(x, spec.num_experts, generator, spec.kmeans_iters).to(weight.dtype))
        else:
            weight.copy_((torch.randn(weight.shape, generator=generator) * weight.shape[1] ** -0.5).to(weight.dtype))
        entry: dict = {"router": spec.router}
        if x is not None and x.shape[0]:
            top = (x.to(weight.dtype) @ weight.t()).topk(spec.top_k, dim=1).indices
            shares = torch.bincount(top.reshape(-1), minlength=spec.num_experts).double() / top.numel()
            entry.update(tokens=int(x.shape[0]), expert_shares=[round(float(s), 4) for s in shares],
                         load_entropy=round(entropy(shares), 4), max_entropy=round(math.log(spec.num_experts), 4))
        report[str(index)] = entry
    return report


# ----------------------------------------------------------------------------------------- entry point


def upcycle_decoder(dense, *, num_experts: int = 4, top_k: int = 2, layers: str | Sequence[int] = "all",
                    generator: torch.Generator, router: str = "random", shared_expert: str = "zero",
                    public_batches: Sequence[tuple[torch.Tensor, torch.Tensor]] = (),
                    public_hidden: Mapping[int, torch.Tensor] | None = None, exclude_ids: Sequence[int] = (),
                    head: str = "causal_lm", num_labels: int = 2, dtype: torch.dtype = torch.float32,
                    source: str | None = None) -> tuple[nn.Module, dict]:
    """Upcycle a dense Llama / Mistral / Qwen2 decoder into Mixtral / Qwen2-MoE, exact at init.

    ``dense``: a transformers model (``*ForCausalLM``, ``*ForSequenceClassification`` or the bare
    ``*Model``) or a ``(config, state_dict)`` pair (config object or ``config.json`` dict; state
    keys as ``save_pretrained`` writes them). ``head``: ``"causal_lm"`` (the dense LM head, or the
    tied embedding) or ``"classification"`` (``num_labels`` outputs; the dense ``score`` when it
    has one of that shape, else normal(0, 0.02) rows from ``generator``).

    ``router="kmeans"`` needs PUBLIC inputs (privacy rule 2: the caller vouches for them):
    ``public_batches`` of ``(input_ids, attention_mask)`` (their MLP inputs are read off the
    upcycled model, which computes the dense function), less ``exclude_ids``; or ``public_hidden``,
    block index -> MLP inputs ``[N, D]``. All random draws come from ``generator``.

    Returns the model (``eval()`` mode, ``dtype``) and a report: source and target families,
    settings, MoE and dense blocks, parameters new or dropped, routing per MoE block.
    """
    spec = DecoderUpcycleSpec(num_experts=num_experts, top_k=top_k,
                              layers=layers if isinstance(layers, str) else tuple(layers), router=router,
                              shared_expert=shared_expert)
    if not isinstance(generator, torch.Generator):
        raise ConfigError("upcycle_decoder needs an explicit torch.Generator (it never draws from the global RNG)")
    dense_config, state = _dense_parts(dense)
    config = moe_decoder_config(dense_config, spec, head=head, num_labels=num_labels)
    if router == "kmeans" and not public_batches and not public_hidden:
        raise ConfigError("the k-means router needs public inputs: pass public_batches or public_hidden "
                          "(or use router='random')")
    with torch.random.fork_rng(devices=[]):  # constructor draws are all overwritten below
        model = _model_class(config.model_type, head)(config)
    model.to(dtype)
    model.eval()
    _check_rope(dense_config, model)
    loaded = load_dense_decoder(model, state, spec, generator)
    if public_hidden:
        inputs = {int(i): v for i, v in public_hidden.items()}
    elif public_batches:
        inputs = mlp_inputs(model, public_batches, spec.max_public_tokens, exclude_ids)
    else:
        inputs = {}
    routing = init_decoder_routers(model, spec, generator, inputs)
    moe = sorted(_moe_block_names(model))
    report = {
        "source": source, "source_model_type": dense_config.model_type, "model_type": config.model_type,
        "head": head, "num_experts": num_experts, "top_k": top_k,
        "layers": spec.layers if isinstance(spec.layers, str) else list(spec.layers),
        "moe_layers": moe, "dense_layers": [i for i in range(config.num_hidden_layers) if i not in moe],
        "router": router, "shared_expert": shared_expert if config.model_type == "qwen2_moe" else None,
        "new_parameters": loaded["new"], "dropped_parameters": loaded["dropped"], "routing": routing,
    }
    return model, report
