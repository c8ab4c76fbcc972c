"""Cost of secure mode per update on the medium model: AES-256-CTR sampling and float64 noise (sum of
four draws) vs the seeded torch generator, next to the per-record engine's time.

One raptor update = Poisson sampling over N records + the engine over the sampled records (in
micro-batches) + the release of every group (noise + public denominators). The secure stream
changes only the sampling and the noise, whose cost does not depend on the batch size; the engine's
grows linearly with it. Printed ratios:

* ``extra / update @ B=16``: the extra seconds of secure mode over a whole update with one
  micro-batch of 16 records (the engine benchmark's medium shape, T = 128), both measured;
* ``extra / update @ B``: the same with the engine time scaled linearly to B records
  (``--batch-size``, default 1024, the CLI's default): ``ceil(B / 16)`` micro-batches.

Trainable set: RAPTOR's (all shared parameters + the experts of one MoE layer).
Medium model: Switch, d = 256, 4 layers, 16 experts, expert width 256, vocab 1024 (as
``benchmarks/engine_speed.py``). Writes benchmarks/results/secure_rng_cost.json.

Run: ``PYTHONPATH=src python benchmarks/secure_rng_cost.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_interleaved, summary  # noqa: E402

MEDIUM = dict(hidden_size=256, num_layers=4, num_heads=4, num_experts=16, top_k=2, expert_intermediate=256,
              vocab_size=1024)
QUICK = dict(hidden_size=32, num_layers=2, num_heads=4, num_experts=4, top_k=2, expert_intermediate=32, vocab_size=256)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny model, 2 reps (smoke run)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=1024, help="B for the extrapolated ratio")
    parser.add_argument("--dataset-size", type=int, default=67_349, help="N for Poisson sampling (SST-2)")
    parser.add_argument("--output", default=str(Path(__file__).resolve().parent / "results" / "secure_rng_cost.json"))
    args = parser.parse_args(argv)

    from raptor.mechanisms import AesCtrGenerator, poisson_sample, seeded_generator
    from raptor.moe.adapters import get_adapter
    from raptor.moe.models import TinySize, build_model
    from raptor.per_sample.engine import PerRecordEngine
    from raptor.roles.public_stats import group_denominators
    from raptor.training.setup.trainable import set_trainable
    from raptor.training.step.noise_plans import FixedPlan
    from raptor.training.step.plan import build_step_plan
    from raptor.training.step.release import release_gradients

    torch.set_num_threads(1)
    shape = QUICK if args.quick else MEDIUM
    reps = 2 if args.quick else args.reps
    micro, seq = 16, 32 if args.quick else 128
    size = TinySize(max_positions=max(256, seq), **shape)
    model = build_model("switch_transformers", size=size, generator=torch.Generator().manual_seed(0))
    model.eval()
    adapter = get_adapter(model)
    adapter.prepare(model)
    layers = adapter.moe_layers(model)
    trained = (layers[0].index,)
    set_trainable(model, layers, policy="roles", trained_layers=trained)
    engine = PerRecordEngine(model, trained_layers=trained, grouping="roles")
    E = shape["num_experts"]
    keys = list(engine.group_keys)
    plan = build_step_plan(FixedPlan(args.batch_size / args.dataset_size, 1, {"shared": 1.0, "expert": 1.0}, 1), engine.group_map.groups,
                           clip_norms={k: 1.0 for k in keys},
                           denominators=group_denominators(keys, batch_size=args.batch_size,
                                                           shares={trained[0]: [1.0 / E] * E}, kind="public"),
                           trained_layers=trained, grouping="roles")
    releases = plan.step(0).groups
    params = dict(engine.group_map.params)
    slices = dict(engine.group_map.groups)
    noised = sum(p.numel() for p in params.values())
    gen = torch.Generator().manual_seed(1)
    batch = {"input_ids": torch.randint(3, shape["vocab_size"], (micro, seq), generator=gen),
             "attention_mask": torch.ones(micro, seq, dtype=torch.long),
             "labels": torch.randint(0, 2, (micro,), generator=gen)}
    sums = engine.compute(batch, plan.clip_norms).clipped_sums
    gens = {"torch": (seeded_generator(2), seeded_generator(3)), "aes": (AesCtrGenerator(), AesCtrGenerator())}

    def mechanisms(kind: str):
        sample_gen, noise_gen = gens[kind]

        def step():
            poisson_sample(args.dataset_size, args.batch_size / args.dataset_size, sample_gen)
            release_gradients(sums, slices, params, releases, noise_gen)
        return step

    steps = {"engine": lambda: engine.compute(batch, plan.clip_norms),
             "mechanisms_torch": mechanisms("torch"), "mechanisms_aes": mechanisms("aes")}
    times = run_interleaved(steps, warmup=1, reps=reps, clocks={"wall": time.perf_counter})["wall"]
    med = {k: summary(v)["median"] for k, v in times.items()}
    extra = med["mechanisms_aes"] - med["mechanisms_torch"]
    update_small = med["engine"] + med["mechanisms_torch"]
    update_b = med["engine"] * math.ceil(args.batch_size / micro) + med["mechanisms_torch"]
    out = {
        "benchmark": "secure_rng_cost", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "model": {"family": "switch_transformers", **shape, "seq_len": seq, "trained_layers": list(trained)},
        "noised_coordinates": noised, "dataset_size": args.dataset_size, "micro_batch": micro,
        "time_s": {k: summary(v) for k, v in times.items()},
        "secure_extra_s": extra,
        "ratio_extra_over_update_B16": extra / update_small,
        "batch_size": args.batch_size,
        "ratio_extra_over_update_B": extra / update_b,
        "ratio_aes_over_torch_mechanisms": med["mechanisms_aes"] / med["mechanisms_torch"],
        "environment": {"python": platform.python_version(), "torch": torch.__version__, "threads": 1},
    }
    print(f"noised coordinates {noised:,}; engine (16 records) {med['engine']:.3f} s; sampling+noise: torch "
          f"{med['mechanisms_torch']:.3f} s, AES {med['mechanisms_aes']:.3f} s (x{out['ratio_aes_over_torch_mechanisms']:.1f})")
    print(f"secure mode extra / update @ B=16: {out['ratio_extra_over_update_B16']:.3f}")
    print(f"secure mode extra / update @ B={args.batch_size} (engine scaled x{math.ceil(args.batch_size / micro)}): "
          f"{out['ratio_extra_over_update_B']:.3f}")
    if not args.quick:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
