"""Memory model: which of the seven families' real checkpoints fit one 80 GB GPU under DP fine-tuning.

Per GPU, bytes (P = all parameters, P_t = trainable ones, b = micro-batch, T = tokens per record):

* weights: 2 P (bf16; 4 P in float32);
* trainable state, bf16 run: 4 P_t float32 master weights + 8 P_t AdamW m, v (float32)
  + 4 P_t float32 clipped sums + 4 P_t float32 noisy released gradient = 20 P_t;
* activations kept for the backward pass: b T L (16 d + 2 k f) x 2 bytes (attention and norm
  inputs ~16 d values per token per layer, the k routed experts' f-wide intermediates ~2 k f);
* per-record buffers of the ghost-norm engine: the b x T x T token Gram matrices of one layer
  at a time (b T^2 x 4 bytes x 2), and one float32 norm per (group, record): negligible here.

DDP replicates all of it (every rank holds the model, the optimizer and the sums), so DDP changes
the throughput, not what fits: a model fits under DDP iff it fits on one GPU.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

GIB = 2**30
GPU_GIB = 80 * 1e9 / GIB  # an "80 GB" card: 74.5 GiB

# name: (checkpoint, total params, d_model, layers, expert ffn width, routed+shared experts per token)
CHECKPOINTS = {
    "switch_transformers": ("google/switch-base-8", 0.62e9, 768, 24, 3072, 1),
    "olmoe": ("allenai/OLMoE-1B-7B-0924", 6.9e9, 2048, 16, 1024, 8),
    "mixtral": ("mistralai/Mixtral-8x7B-v0.1", 46.7e9, 4096, 32, 14336, 2),
    "qwen2_moe": ("Qwen/Qwen1.5-MoE-A2.7B", 14.3e9, 2048, 24, 1408, 8),
    "qwen3_moe": ("Qwen/Qwen3-30B-A3B", 30.5e9, 2048, 48, 768, 8),
    "deepseek_v2": ("deepseek-ai/DeepSeek-V2-Lite", 15.7e9, 2048, 27, 1408, 8),
    "deepseek_v3": ("deepseek-ai/DeepSeek-V3", 671e9, 7168, 61, 2048, 9),
}


def estimate(total: float, d: int, layers: int, f: int, k: int, *, trainable: float, b: int, T: int) -> dict:
    weights = 2 * total
    state = 20 * trainable
    activations = b * T * layers * (16 * d + 2 * k * f) * 2
    per_record = 2 * b * T * T * 4
    peak = weights + state + activations + per_record
    return {"weights_gib": weights / GIB, "trainable_state_gib": state / GIB,
            "activations_gib": activations / GIB, "per_record_gib": per_record / GIB,
            "total_gib": peak / GIB, "fits_80gb": peak / GIB <= GPU_GIB}


def table(b: int = 8, T: int = 128, lora_rank: int = 8) -> dict:
    rows = {}
    for family, (ckpt, total, d, layers, f, k) in CHECKPOINTS.items():
        lora = layers * 4 * 2 * lora_rank * d  # q, k, v, o: A (r x d) and B (d x r)
        rows[family] = {"checkpoint": ckpt, "params_b": total / 1e9,
                        "full": estimate(total, d, layers, f, k, trainable=total, b=b, T=T),
                        "lora": estimate(total, d, layers, f, k, trainable=lora, b=b, T=T)}
    return {"micro_batch": b, "tokens": T, "lora_rank": lora_rank, "gpu_gib": GPU_GIB, "rows": rows}


def markdown(t: dict) -> str:
    lines = [f"micro-batch {t['micro_batch']}, T = {t['tokens']}, bf16 weights, LoRA rank {t['lora_rank']} on "
             "attention; GiB per GPU (DDP: the same per rank)", "",
             "| family | checkpoint | params | full FT GiB | fits | LoRA GiB | fits |",
             "|---|---|---:|---:|:-:|---:|:-:|"]
    for fam, r in t["rows"].items():
        full, lora = r["full"], r["lora"]
        lines.append(f"| {fam} | {r['checkpoint']} | {r['params_b']:.1f} B | {full['total_gib']:.0f} | "
                     f"{'yes' if full['fits_80gb'] else 'no'} | {lora['total_gib']:.0f} | "
                     f"{'yes' if lora['fits_80gb'] else 'no'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "memory_model.json")
    a = p.parse_args(argv)
    t = table(a.micro_batch, a.tokens)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(t, indent=2) + "\n")
    print(markdown(t))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
