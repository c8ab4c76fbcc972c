"""The three failure modes of dense DP-SGD on an MoE (issue 12, item 4), measured on the warm
model with PUBLIC data: suppression, dilution, low-load SNR (raptor.analysis.diagnostics).

The settings are the grid's (:mod:`run_grid`): the public slice of the task's training split,
its max length, batch size and epochs; the clip norms are the grid's public calibration
(``pub-median``: the public median norm of DP-SGD's one group, of RAPTOR's shared group and of
the owner experts, with RAPTOR's median-ratio rule per expert); the sigmas are the planned ones of
a DP-SGD and a RAPTOR run at ``--epsilon`` (shared ratio ``--shared-ratio``).

    python experiments/failure_modes.py --model-dir /work/runs/switch-warm --epsilon 1

Writes experiments/results/failure_modes_<task>_<model>_eps<e>.json and .png (three panels, one
per failure mode). Privacy: public records and the public initial weights only.

    python experiments/failure_modes.py --replot experiments/results/failure_modes_*.json

redraws the PNGs from their JSON files alone (no model, no data).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import run_grid as rg
import torch

from raptor.analysis.grid import Cell

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--model-dir", help="the pre-trained model directory (required unless --replot)")
    p.add_argument("--replot", nargs="+", type=Path, metavar="JSON",
                   help="redraw the PNG beside each diagnostics JSON, and do nothing else")
    p.add_argument("--composition", default=None, metavar="JSON[:ROW]",
                   help="with --replot: add this composition row (experiments/composition.py's JSON; row "
                        "default 'raptor') to figures that lack one")
    p.add_argument("--model", choices=("warm", "random"), default="warm")
    p.add_argument("--data-dir", default=str(HERE.parent.parent / "shared" / "data" / "glue"))
    p.add_argument("--task", default="sst2")
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--shared-ratio", type=float, default=0.3)
    p.add_argument("--head-init", choices=("random", "label-words"), default="label-words")
    p.add_argument("--public-size", type=int, default=500)
    p.add_argument("--max-train", type=int, default=2000, help="N for the noise plan (the grid's private size)")
    p.add_argument("--max-length", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out-dir", default=str(HERE / "results"))
    args = p.parse_args(argv)
    if args.replot:
        comp = None
        if args.composition:
            import json

            file, _, row = args.composition.partition(":")
            comp = json.loads(Path(file).read_text())["rows"][row or "raptor"]
        return replot(args.replot, task=args.task, composition=comp)
    if not args.model_dir:
        p.error("--model-dir is required (or --replot JSON ... to redraw figures)")
    torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()
    from raptor.analysis.diagnostics import (
        failure_mode_diagnostics,
        failure_modes_title,
        plot_failure_modes,
    )
    from raptor.roles.groups import GroupKey
    from raptor.training.run.assemble import assemble_run
    from raptor.training.saving.json_io import write_strict_json
    from raptor.training.setup.public_stage import batches

    start = time.perf_counter()
    fx = rg.Fixed(model_dir=str(Path(args.model_dir).resolve()), data_dir=args.data_dir, public_size=args.public_size,
                  max_train=args.max_train, max_length=args.max_length, batch_size=args.batch_size, epochs=args.epochs,
                  head=args.head_init)
    label = rg.model_label(args.model, fx.model_dir)
    d = rg.task_data(args.task, fx.data_dir, fx.public_size, fx.selection_size, fx.max_train)
    recs = rg.records_of(fx.model_dir, args.task, fx.data_dir, fx.public_size, fx.selection_size, fx.max_train,
                         fx.max_length)
    num_labels = len(d.private.label_names)
    trainers, clips = {}, {}
    for method in ("dpsgd", "raptor"):
        cell = Cell(model=label, task=args.task, method=method, epsilon=args.epsilon, seed=0, stage="final",
                    hparams={**fx.hparams(), "lr": 1e-3, "clip": "pub-median", "shared_ratio": args.shared_ratio,
                             **({"clip_rule": "median-ratio"} if method == "raptor" else {})})

        def build(cs, ce, cell=cell):
            net, _ = rg.make_model(label, fx.model_dir, num_labels, 0, args.head_init, args.task)
            return assemble_run(rg.build_config(cell, fx, cs, ce), net, train=recs["private"], validation=None,
                                 public=recs["public"])

        shared, experts = rg.calibration_norms(cell, fx, build)
        clips[method] = (rg.clip_value("pub-median", shared),
                         rg.clip_value("pub-median", experts) if experts.numel() else rg.clip_value("pub-median", shared))
        trainers[method] = build(*clips[method])
    raptor, dense = trainers["raptor"], trainers["dpsgd"]
    clip_table = raptor.plan.clip_norms
    expert_clips = {k: v for k, v in clip_table.items() if isinstance(k, GroupKey) and k.is_expert}
    diag = failure_mode_diagnostics(
        raptor.model, batches(recs["public"], fx.micro_batch_size, "cpu"),
        trained_layers=raptor.plan.trained_layers, batch_size=fx.batch_size, clip_dense=clips["dpsgd"][0],
        clip_shared=clips["raptor"][0], clip_expert=expert_clips,
        sigma_dense=dense.plan.sigmas["shared"], sigma_shared=raptor.plan.sigmas["shared"],
        sigma_expert=raptor.plan.sigmas["expert"])
    name = f"failure_modes_{args.task}_{rg._slug(label)}_eps{args.epsilon:g}"
    out = Path(args.out_dir)
    diag.update(model=label, task=args.task, model_dir=fx.model_dir, epsilon=args.epsilon, delta=fx.delta,
                steps=raptor.plan.steps, sample_rate=raptor.plan.sample_rate, shared_ratio=args.shared_ratio,
                head_init=args.head_init, data_rule=d.rule, seconds=time.perf_counter() - start,
                command=" ".join(["python", "experiments/failure_modes.py", *(argv if argv is not None else sys.argv[1:])]))
    from raptor.analysis.composition import gradient_composition

    diag["composition"] = gradient_composition(  # the dense method's trainable set: what one clip sees
        dense.model, recs["public"], trainable=[n for n, q in dense.model.named_parameters() if q.requires_grad],
        clip=clips["dpsgd"][0])
    write_strict_json(out / f"{name}.json", diag)
    plot_failure_modes(diag, out / f"{name}.png", title=failure_modes_title(diag, args.task))
    sup = diag["suppression"]
    print(f"suppression: median owner-expert share of ||g||^2 {sup['expert_share_of_sq_norm']['median']:.3g}; "
          f"median clip factor on the expert part: global {sup['global_clip_factor']['median']:.3g} vs "
          f"per-role {sup['role_clip_factor']['median']:.3g}")
    for e in diag["experts"]:
        print(f"expert {e['layer']}/{e['expert']}: public load {e['public_load']:.3f}; SNR dense {e['snr_dense']:.3g} "
              f"raptor {e['snr_raptor']:.3g}")
    print(f"wrote {out / (name + '.json')} and .png")
    return 0


def replot(paths: list[Path], *, task: str, composition: dict | None = None) -> int:
    """Redraw each JSON's figure beside it; the task comes from the JSON (older files: ``--task``).
    ``composition``: a composition row (experiments/composition.py) added to JSONs that lack one."""
    import json

    from raptor.analysis.diagnostics import failure_modes_title, plot_failure_modes

    for path in paths:
        diag = json.loads(path.read_text())
        if composition is not None and "composition" not in diag:
            diag["composition"] = composition
            path.write_text(json.dumps(diag, indent=1), encoding="utf-8")
        out = plot_failure_modes(diag, path.with_suffix(".png"), title=failure_modes_title(diag, diag.get("task", task)))
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
