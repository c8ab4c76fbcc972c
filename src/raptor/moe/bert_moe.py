"""``bert_moe``: a BERT-family encoder whose feed-forward blocks may be Mixtures of Experts.

It is the family that sparse upcycling (:mod:`raptor.pretrain.upcycle`) produces from a dense BERT
checkpoint such as all-MiniLM-L6-v2: the layers listed in ``config.moe_layers`` hold
``config.num_experts`` copies of the dense FFN behind a top-1 router; the other layers keep their
dense FFN. Classes (registered with transformers' Auto classes on import, so that
``save_pretrained`` / ``from_pretrained`` round-trip):

* :class:`BertMoeConfig` (``model_type = "bert_moe"``);
* :class:`BertMoeModel`: embeddings + encoder layers (post-norm, as BERT);
* :class:`BertMoeForSequenceClassification`: masked mean pooling (MiniLM's sentence pooling) and
  a linear ``classifier``;
* :class:`BertMoeForMaskedLM`: a masked-token head (dense, GELU, norm, decoder tied to the input
  embedding) for public continued pre-training.

How the routing keeps the dense function at initialisation (docs/METHOD.md): each token goes to
its top-1 expert and the expert's output is scaled by ``p / stop_grad(p)``, which is exactly 1 in
value (so the output equals the expert's, and every expert starts as the dense FFN) while the
router still receives the gradient ``dL/dp = (dL/dy . y) / p`` in public pre-training. Routers
are frozen in private fine-tuning (every method), so there the scale is a constant 1.

What the per-record engine needs (see :mod:`raptor.per_sample.capture`): every parametrised op is a
``Linear``, an ``Embedding`` or a norm written as ``normalise(x) * weight + bias``; position ids
are expanded to ``[B, T]``; each expert is ``wi -> act -> dropout(p=0) -> wo`` with bias-free
linears and its two biases kept as 2-D ``[d_out, 1]`` parameters (``wi_bias``, ``wo_bias``) that
the engine's expert dispatch records as grouped uses on a column of ones. No op couples records:
no load-balancing loss, no capacity, no batch statistics.

Legend: B records, T tokens, D hidden, F FFN width, E experts, N = B*T.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.modeling_outputs import BaseModelOutput, MaskedLMOutput, SequenceClassifierOutput

from raptor.errors import ConfigError

MODEL_TYPE = "bert_moe"


class BertMoeConfig(PretrainedConfig):
    """A BERT encoder config plus the MoE fields (``num_experts``, ``moe_layers``)."""

    model_type = MODEL_TYPE

    def __init__(self, vocab_size: int = 30522, hidden_size: int = 384, num_hidden_layers: int = 6,
                 num_attention_heads: int = 12, intermediate_size: int = 1536, hidden_act: str = "gelu",
                 max_position_embeddings: int = 512, type_vocab_size: int = 2, layer_norm_eps: float = 1e-12,
                 num_experts: int = 4, moe_layers: list[int] | tuple[int, ...] | None = None,
                 initializer_range: float = 0.02, pad_token_id: int = 0, upcycled_from: str | None = None,
                 **kwargs):
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(pad_token_id=pad_token_id, **kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.layer_norm_eps = layer_norm_eps
        self.num_experts = num_experts
        self.moe_layers = list(range(num_hidden_layers)) if moe_layers is None else [int(i) for i in moe_layers]
        self.initializer_range = initializer_range
        self.upcycled_from = upcycled_from
        if hidden_size % num_attention_heads:
            raise ConfigError(f"bert_moe: hidden_size {hidden_size} must be divisible by num_attention_heads "
                              f"{num_attention_heads}")
        bad = [i for i in self.moe_layers if not 0 <= i < num_hidden_layers]
        if bad:
            raise ConfigError(f"bert_moe: moe_layers {bad} are outside range({num_hidden_layers})")
        if num_experts < 1:
            raise ConfigError(f"bert_moe: num_experts must be >= 1, got {num_experts}")


class LayerNorm(nn.Module):
    """``layer_norm(x) * weight + bias``: BERT's LayerNorm, written with an explicit scale and shift so
    that the per-record engine records both (a 1-D scale and a 1-D bias on the last dimension)."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.bias = nn.Parameter(torch.zeros(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), None, None, self.eps) * self.weight + self.bias


def _activation(name: str) -> nn.Module:
    if name == "gelu":
        return nn.GELU()
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return nn.GELU(approximate="tanh")
    if name == "relu":
        return nn.ReLU()
    raise ConfigError(f"bert_moe: hidden_act {name!r} is not supported (gelu, gelu_new, relu)")


class BertMoeEmbeddings(nn.Module):
    def __init__(self, config: BertMoeConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        B, T = input_ids.shape
        positions_BT = torch.arange(T, device=input_ids.device).unsqueeze(0).expand(B, T)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = (self.word_embeddings(input_ids) + self.position_embeddings(positions_BT)
             + self.token_type_embeddings(token_type_ids))
        return self.norm(x)


class BertMoeAttention(nn.Module):
    """BERT self-attention (q/v/o with biases, k without) followed by the residual and the post-norm."""

    def __init__(self, config: BertMoeConfig):
        super().__init__()
        D = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.q_proj = nn.Linear(D, D)
        # no key bias: it adds q.b_k to every score of a query, which softmax ignores, so BERT's key bias
        # never changes the output and its gradient is exactly zero (upcycling drops it, exactly)
        self.k_proj = nn.Linear(D, D, bias=False)
        self.v_proj = nn.Linear(D, D)
        self.o_proj = nn.Linear(D, D)
        self.norm = LayerNorm(D, config.layer_norm_eps)

    def forward(self, x_BTD: torch.Tensor, bias_B11T: torch.Tensor) -> torch.Tensor:
        B, T, D = x_BTD.shape
        H = self.num_heads

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(B, T, H, D // H).transpose(1, 2)

        q, k, v = heads(self.q_proj(x_BTD)), heads(self.k_proj(x_BTD)), heads(self.v_proj(x_BTD))
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=bias_B11T.to(q.dtype))
        out = self.o_proj(ctx.transpose(1, 2).reshape(B, T, D))
        return self.norm(out + x_BTD)


class BertMoeDenseFFN(nn.Module):
    """A dense feed-forward block (a layer that was not upcycled): ``fc2(act(fc1(x)))``."""

    def __init__(self, config: BertMoeConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = _activation(config.hidden_act)
        self.fc2 = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, x_BTD: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x_BTD)))


class BertMoeExpert(nn.Module):
    """One expert: ``wo(dropout(act(wi x + wi_bias))) + wo_bias``. The linears are bias-free and the
    biases are 2-D ``[d_out, 1]`` parameters (the engine records them as grouped uses on ones)."""

    def __init__(self, config: BertMoeConfig):
        super().__init__()
        D, Fw = config.hidden_size, config.intermediate_size
        self.wi = nn.Linear(D, Fw, bias=False)
        self.wi_bias = nn.Parameter(torch.zeros(Fw, 1))
        self.act = _activation(config.hidden_act)
        self.dropout = nn.Dropout(0.0)
        self.wo = nn.Linear(Fw, D, bias=False)
        self.wo_bias = nn.Parameter(torch.zeros(D, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.wi(x) + self.wi_bias[:, 0])
        return self.wo(self.dropout(h)) + self.wo_bias[:, 0]


class BertMoeExperts(nn.ModuleDict):
    """``expert_0`` ... ``expert_{E-1}``; ``forward(x_ND, selected_NE, weights_N1)``: each token through
    its selected expert, scaled by its routing weight (the engine replaces this forward in a call)."""

    def __init__(self, config: BertMoeConfig):
        super().__init__({f"expert_{e}": BertMoeExpert(config) for e in range(config.num_experts)})
        self.num_experts = config.num_experts

    def forward(self, x_ND: torch.Tensor, selected: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        N = x_ND.shape[0]
        selected_NE = selected.reshape(N, -1)
        weights_N = weights.reshape(N, -1)[:, 0]
        out = torch.zeros_like(x_ND)
        for e in range(self.num_experts):  # an expert without tokens runs on no rows (its gradient is zero)
            idx = torch.nonzero(selected_NE[:, e], as_tuple=False).squeeze(1)
            y = self[f"expert_{e}"](x_ND.index_select(0, idx)) * weights_N.index_select(0, idx).unsqueeze(-1)
            out = out.index_add(0, idx, y.to(out.dtype))
        return out


class BertMoeRouter(nn.Module):
    """Top-1 router. Returns ``(one-hot choice [.., E], p / stop_grad(p) [.., 1], logits [.., E])``:
    the layout of transformers' Switch router, so the engine's top-1 hook reads logits at index 2."""

    def __init__(self, config: BertMoeConfig):
        super().__init__()
        self.num_experts = config.num_experts
        self.classifier = nn.Linear(config.hidden_size, config.num_experts)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits = self.classifier(x.to(self.classifier.weight.dtype))
        probs = logits.softmax(dim=-1)
        choice = probs.argmax(dim=-1, keepdim=True)
        p = probs.gather(-1, choice)
        scale = (p / p.detach()).to(x.dtype)  # exactly 1 in value; carries the router's gradient
        onehot = F.one_hot(choice.squeeze(-1), num_classes=self.num_experts)
        return onehot, scale, logits


class BertMoeSparseBlock(nn.Module):
    """The MoE feed-forward block: a top-1 ``router`` and ``experts`` (a ModuleDict of expert FFNs)."""

    def __init__(self, config: BertMoeConfig):
        super().__init__()
        self.router = BertMoeRouter(config)
        self.experts = BertMoeExperts(config)

    def forward(self, x_BTD: torch.Tensor) -> torch.Tensor:
        B, T, D = x_BTD.shape
        selected, weights, _ = self.router(x_BTD)
        y = self.experts(x_BTD.reshape(B * T, D), selected.reshape(B * T, 1, -1), weights.reshape(B * T, 1))
        return y.reshape(B, T, D)


class BertMoeLayer(nn.Module):
    def __init__(self, config: BertMoeConfig, index: int):
        super().__init__()
        self.attention = BertMoeAttention(config)
        self.mlp = BertMoeSparseBlock(config) if index in config.moe_layers else BertMoeDenseFFN(config)
        self.mlp_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, x_BTD: torch.Tensor, bias_B11T: torch.Tensor) -> torch.Tensor:
        h = self.attention(x_BTD, bias_B11T)
        return self.mlp_norm(self.mlp(h) + h)


class BertMoePreTrainedModel(PreTrainedModel):
    config_class = BertMoeConfig
    base_model_prefix = "bert"
    _no_split_modules = ["BertMoeLayer"]  # noqa: RUF012
    _tied_weights_keys = {}  # noqa: RUF012 - the MLM head reads the embedding matrix directly

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # Only transformers' own initialisation path calls this (raptor re-draws every weight from an
        # explicit generator: raptor.moe.models.init_weights_, or loads them).
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            module.weight.normal_(0.0, std)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.normal_(0.0, std)
        elif isinstance(module, LayerNorm):
            module.weight.fill_(1.0)
            module.bias.zero_()
        elif isinstance(module, BertMoeExpert):
            module.wi_bias.zero_()
            module.wo_bias.zero_()
        elif isinstance(module, BertMoeMLMHead):
            module.bias.zero_()


def attention_bias(attention_mask: torch.Tensor | None, B: int, T: int, dtype, device) -> torch.Tensor:
    """Additive key mask ``[B, 1, 1, T]``: 0 for tokens, the dtype's minimum for padding (a finite
    value, so that a record with no tokens gets uniform attention instead of NaN)."""
    if attention_mask is None:
        return torch.zeros(B, 1, 1, T, dtype=dtype, device=device)
    keep = attention_mask.to(device=device).reshape(B, 1, 1, T).bool()
    return torch.zeros(B, 1, 1, T, dtype=dtype, device=device).masked_fill(~keep, torch.finfo(dtype).min)


class BertMoeModel(BertMoePreTrainedModel):
    def __init__(self, config: BertMoeConfig):
        super().__init__(config)
        self.embeddings = BertMoeEmbeddings(config)
        self.layers = nn.ModuleList(BertMoeLayer(config, i) for i in range(config.num_hidden_layers))
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embeddings.word_embeddings = value

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, output_hidden_states: bool = False,
                **kwargs) -> BaseModelOutput:
        B, T = input_ids.shape
        x = self.embeddings(input_ids, token_type_ids)
        bias = attention_bias(attention_mask, B, T, x.dtype, x.device)
        states = [x] if output_hidden_states else None
        for layer in self.layers:
            x = layer(x, bias)
            if states is not None:
                states.append(x)
        return BaseModelOutput(last_hidden_state=x, hidden_states=tuple(states) if states is not None else None)


def mean_pool(hidden_BTD: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Masked mean over tokens (a record with no tokens pools to zero: the count is clamped, not the values)."""
    if attention_mask is None:
        return hidden_BTD.mean(dim=1)
    mask_BT1 = attention_mask.to(hidden_BTD.dtype).unsqueeze(-1)
    return (hidden_BTD * mask_BT1).sum(dim=1) / mask_BT1.sum(dim=1).clamp(min=1.0)


class BertMoeForSequenceClassification(BertMoePreTrainedModel):
    """Encoder + masked mean pooling + linear ``classifier`` (cross-entropy, or MSE for one label)."""

    def __init__(self, config: BertMoeConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = BertMoeModel(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.bert.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.bert.set_input_embeddings(value)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                loss_reduction: str = "mean", **kwargs) -> SequenceClassifierOutput:
        hidden = self.bert(input_ids, attention_mask, token_type_ids).last_hidden_state
        logits = self.classifier(mean_pool(hidden, attention_mask))
        loss = None
        if labels is not None:
            if logits.shape[-1] == 1:
                loss = F.mse_loss(logits.float()[:, 0], labels.float(), reduction=loss_reduction)
            else:
                loss = F.cross_entropy(logits.float(), labels, reduction=loss_reduction)
        return SequenceClassifierOutput(loss=loss, logits=logits)


class BertMoeMLMHead(nn.Module):
    """BERT's masked-token head: dense, act, norm, then a decoder tied to the input embedding plus a bias."""

    def __init__(self, config: BertMoeConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = _activation(config.hidden_act)
        self.norm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        return F.linear(self.norm(self.act(self.dense(hidden))), embedding, self.bias)


class BertMoeForMaskedLM(BertMoePreTrainedModel):
    """Encoder + masked-token head (public pre-training; ``hidden`` / ``token_logits`` as Switch's)."""

    def __init__(self, config: BertMoeConfig):
        super().__init__(config)
        self.bert = BertMoeModel(config)
        self.mlm_head = BertMoeMLMHead(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.bert.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.bert.set_input_embeddings(value)

    def hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.bert(input_ids, attention_mask).last_hidden_state

    def token_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.mlm_head(hidden, self.get_input_embeddings().weight)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, **kwargs) -> MaskedLMOutput:
        logits = self.token_logits(self.hidden(input_ids, attention_mask))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        return MaskedLMOutput(loss=loss, logits=logits)


def _register() -> None:
    try:
        AutoConfig.register(MODEL_TYPE, BertMoeConfig)
    except ValueError:  # registered already (a re-import)
        return
    AutoModel.register(BertMoeConfig, BertMoeModel)
    AutoModelForSequenceClassification.register(BertMoeConfig, BertMoeForSequenceClassification)
    AutoModelForMaskedLM.register(BertMoeConfig, BertMoeForMaskedLM)


_register()

__all__ = ["BertMoeConfig", "BertMoeForMaskedLM", "BertMoeForSequenceClassification", "BertMoeModel",
           "attention_bias", "mean_pool"]
