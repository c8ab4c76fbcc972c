"""Load (and, for tests, write) a DeepSeek-VL2 checkpoint directory in the release's layout.

A release directory holds ``config.json`` (schema: :mod:`raptor.moe.vl2.config`), safetensors
shards (``model.safetensors.index.json`` + ``model-*.safetensors``, or ``*.safetensors``) and the
tokenizer files. No remote code is run: the config is parsed as JSON and the weights are read
with ``safetensors``.

Release key -> raptor parameter (everything not listed keeps its name):

==========================================================  =============================================
release key                                                 raptor (``DeepseekVL2ForCausalLM``)
==========================================================  =============================================
``vision.patch_embed.proj.{weight,bias}``                   ``vision.embeddings.patch_embedding.*``
``vision.pos_embed`` [1, P, W]                              ``vision.embeddings.position_embedding.weight`` [P, W]
``vision.blocks.{i}.norm1.*`` / ``norm2.*``                 ``vision.encoder.layers.{i}.layer_norm1.*`` / ``layer_norm2.*``
``vision.blocks.{i}.attn.qkv.{weight,bias}`` [3W, W]        ``...self_attn.{q,k,v}_proj.*`` (rows split in q, k, v order)
``vision.blocks.{i}.attn.proj.*``                           ``...self_attn.out_proj.*``
``vision.blocks.{i}.mlp.fc1.*`` / ``fc2.*``                 ``...mlp.fc1.*`` / ``fc2.*``
``vision.norm.*``                                           ``vision.post_layernorm.*``
``vision.attn_pool.*``                                      dropped: the MAP head is unused (``ignore_head``)
``language.model.layers.{i}.mlp.experts.{e}.gate_proj``     ``...mlp.experts.gate_up_proj[e][:I]``
``language.model.layers.{i}.mlp.experts.{e}.up_proj``       ``...mlp.experts.gate_up_proj[e][I:]``
``language.model.layers.{i}.mlp.experts.{e}.down_proj``     ``...mlp.experts.down_proj[e]``
==========================================================  =============================================

Unchanged: ``projector.layers.N.*``, ``image_newline``, ``view_seperator``,
``language.model.embed_tokens.weight``, ``language.model.layers.{i}.self_attn.{q,k,v,o}_proj.weight``,
``language.model.layers.{i}.{input,post_attention}_layernorm.weight``,
``language.model.layers.{i}.mlp.{gate_proj,up_proj,down_proj}.weight`` (dense layers),
``language.model.layers.{i}.mlp.gate.weight``, ``language.model.layers.{i}.mlp.shared_experts.*``,
``language.model.norm.weight``, ``language.lm_head.weight``.

A release key that maps to nothing, or a raptor parameter that no key fills, raises
:class:`UnsupportedModelError` naming it.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from raptor.errors import ConfigError, UnsupportedModelError
from raptor.moe.vl2.config import Vl2Config
from raptor.moe.vl2.model import DeepseekVL2ForCausalLM

_BLOCK = re.compile(r"^vision\.blocks\.(\d+)\.(.+)$")
_EXPERT = re.compile(r"^(language\.model\.layers\.\d+\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
_VISION_BLOCK_MAP = {"norm1": "layer_norm1", "norm2": "layer_norm2", "attn.proj": "self_attn.out_proj",
                     "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
DROPPED_PREFIXES = ("vision.attn_pool.",)


def read_config(directory: str | Path) -> Vl2Config:
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise ConfigError(f"--model {directory}: no config.json")
    return Vl2Config.from_dict(json.loads(path.read_text()))


def _shards(directory: Path) -> list[Path]:
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [directory / f for f in files]
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ConfigError(f"--model {directory}: no *.safetensors files")
    return files


def release_to_raptor(release: dict[str, torch.Tensor], config: Vl2Config) -> dict[str, torch.Tensor]:
    """Map a release state dict to raptor's parameter names (see the module table)."""
    out: dict[str, torch.Tensor] = {}
    experts: dict[str, dict[int, dict[str, torch.Tensor]]] = defaultdict(lambda: defaultdict(dict))
    W = config.vision.width
    for key, value in release.items():
        if key.startswith(DROPPED_PREFIXES):
            continue
        if key.startswith("vision."):
            m = _BLOCK.match(key)
            if key.startswith("vision.patch_embed.proj."):
                out["vision.embeddings.patch_embedding." + key.rsplit(".", 1)[1]] = value
            elif key == "vision.pos_embed":
                out["vision.embeddings.position_embedding.weight"] = value.reshape(value.shape[-2], value.shape[-1])
            elif key.startswith("vision.norm."):
                out["vision.post_layernorm." + key.rsplit(".", 1)[1]] = value
            elif m is not None:
                i, rest = m.groups()
                mod, leaf = rest.rsplit(".", 1)
                base = f"vision.encoder.layers.{i}."
                if mod == "attn.qkv":
                    for j, part in enumerate(("q_proj", "k_proj", "v_proj")):
                        out[f"{base}self_attn.{part}.{leaf}"] = value[j * W:(j + 1) * W]
                elif mod in _VISION_BLOCK_MAP:
                    out[f"{base}{_VISION_BLOCK_MAP[mod]}.{leaf}"] = value
                else:
                    raise UnsupportedModelError(f"unexpected vision key {key!r} in the checkpoint")
            else:
                raise UnsupportedModelError(f"unexpected vision key {key!r} in the checkpoint")
            continue
        m = _EXPERT.match(key)
        if m is not None:
            prefix, e, proj = m.groups()
            experts[prefix][int(e)][proj] = value
            continue
        out[key] = value
    for prefix, per_expert in experts.items():
        E = config.language.n_routed_experts
        missing = [e for e in range(E) if set(per_expert.get(e, {})) != {"gate_proj", "up_proj", "down_proj"}]
        if missing:
            raise UnsupportedModelError(f"{prefix}: experts {missing[:5]} lack gate_proj/up_proj/down_proj weights")
        out[f"{prefix}.gate_up_proj"] = torch.stack(
            [torch.cat([per_expert[e]["gate_proj"], per_expert[e]["up_proj"]]) for e in range(E)])
        out[f"{prefix}.down_proj"] = torch.stack([per_expert[e]["down_proj"] for e in range(E)])
    return out


def raptor_to_release(state: dict[str, torch.Tensor], config: Vl2Config) -> dict[str, torch.Tensor]:
    """The inverse of :func:`release_to_raptor` (without the dropped MAP-head keys)."""
    out: dict[str, torch.Tensor] = {}
    inverse = {v: k for k, v in _VISION_BLOCK_MAP.items()}
    qkv: dict[str, dict[str, torch.Tensor]] = defaultdict(dict)
    for key, value in state.items():
        if key.startswith("vision."):
            rest = key[len("vision."):]
            if rest.startswith("embeddings.patch_embedding."):
                out["vision.patch_embed.proj." + rest.rsplit(".", 1)[1]] = value
            elif rest == "embeddings.position_embedding.weight":
                out["vision.pos_embed"] = value[None]
            elif rest.startswith("post_layernorm."):
                out["vision.norm." + rest.rsplit(".", 1)[1]] = value
            else:
                m = re.match(r"^encoder\.layers\.(\d+)\.(.+)\.(weight|bias)$", rest)
                if m is None:
                    raise UnsupportedModelError(f"no release name for {key!r}")
                i, mod, leaf = m.groups()
                if mod.startswith("self_attn.") and mod.split(".")[1] in ("q_proj", "k_proj", "v_proj"):
                    qkv[f"vision.blocks.{i}.attn.qkv.{leaf}"][mod.split(".")[1]] = value
                else:
                    out[f"vision.blocks.{i}.{inverse[mod]}.{leaf}"] = value
            continue
        m = re.match(r"^(language\.model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj)$", key)
        if m is not None:
            prefix, which = m.groups()
            for e in range(value.shape[0]):
                if which == "gate_up_proj":
                    gate, up = value[e].chunk(2, dim=0)
                    out[f"{prefix}.{e}.gate_proj.weight"] = gate
                    out[f"{prefix}.{e}.up_proj.weight"] = up
                else:
                    out[f"{prefix}.{e}.down_proj.weight"] = value[e]
            continue
        out[key] = value
    for key, parts in qkv.items():
        out[key] = torch.cat([parts["q_proj"], parts["k_proj"], parts["v_proj"]])
    return out


def load_vl2(directory: str | Path, *, dtype: torch.dtype = torch.float32) -> DeepseekVL2ForCausalLM:
    """A :class:`DeepseekVL2ForCausalLM` with the weights of a release-layout directory."""
    directory = Path(directory)
    config = read_config(directory)
    release: dict[str, torch.Tensor] = {}
    for shard in _shards(directory):
        with safe_open(str(shard), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
                release[key] = f.get_tensor(key)
    state = release_to_raptor(release, config)
    with torch.random.fork_rng(devices=[]):  # constructor draws are all overwritten by the checkpoint
        model = DeepseekVL2ForCausalLM(config)
    expected = dict(model.named_parameters())
    unknown = sorted(set(state) - set(expected))
    missing = sorted(set(expected) - set(state))
    if unknown or missing:
        raise UnsupportedModelError(
            f"{directory}: checkpoint keys do not match DeepSeek-VL2 ({config.language.num_hidden_layers} layers): "
            f"unexpected {unknown[:5]}, missing {missing[:5]}"
        )
    with torch.no_grad():
        for name, p in expected.items():
            value = state[name]
            if tuple(value.shape) != tuple(p.shape):
                raise UnsupportedModelError(f"{name}: checkpoint shape {tuple(value.shape)}, model {tuple(p.shape)}")
            p.copy_(value.to(p.dtype))
    model.to(dtype)
    model.frozen_vision_()
    model.eval()
    return model


def save_release_checkpoint(model: DeepseekVL2ForCausalLM, directory: str | Path, *,
                            map_head: dict[str, torch.Tensor] | None = None, dtype: torch.dtype = torch.float32) -> Path:
    """Write ``config.json`` + one safetensors shard + its index in the release's key layout.

    ``map_head``: ``vision.attn_pool.*`` tensors to store too (the release checkpoint has them;
    raptor drops them on load).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {n: p.detach().to(dtype).contiguous() for n, p in model.named_parameters()}
    release = raptor_to_release(state, model.config)
    release.update({k: v.to(dtype).contiguous() for k, v in (map_head or {}).items()})
    shard = "model-00001-of-00001.safetensors"
    save_file(release, str(directory / shard), metadata={"format": "pt"})
    index = {"metadata": {"total_size": sum(v.numel() * v.element_size() for v in release.values())},
             "weight_map": {k: shard for k in sorted(release)}}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    config = model.config.to_dict()
    config.setdefault("architectures", ["DeepseekVLV2ForCausalLM"])
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return directory
