"""raptor.per_sample: per-record, per-role gradient norms and clipped sums for HF MoE models.

One forward and one backward give, for every record of a batch, its gradient norm in every
clipping group (``shared`` and one ``expert/LAYER/EXPERT`` group per expert of each trained MoE
layer, or a single ``dense`` group), the clip factors ``min(1, C_g / norm)`` and the clipped sums
per parameter. Under ``grouping="roles"`` a record's gradient reaches only its owner expert in each
trained layer; the shared parameters get its full gradient. :func:`reference.reference_compute`
is the slow one-record-at-a-time oracle; ``raptor check FAMILY`` compares the two.

Example (compare with your own one-record loop)::

    import torch
    from raptor.moe.models import build_model
    from raptor.per_sample import PerRecordEngine, GroupKey

    model = build_model("olmoe").double()              # tiny random OLMoE classifier
    model.model.layers[0].mlp.experts.requires_grad_(False)  # only layer 1's experts are trained
    engine = PerRecordEngine(model, trained_layers=[1], grouping="roles")

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 500, (4, 8), generator=g)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor([0, 1, 1, 0])}
    clip = {key: 0.5 for key in engine.group_keys}    # one clip norm per group
    res = engine.compute(batch, clip)
    res.norms[GroupKey.shared()]                      # [4] per-record shared-gradient norms
    res.norms[GroupKey.expert(1, 2)]                  # [4], 0 for records that expert 2 does not own
    res.owners[1]                                     # [4] owner expert of each record in layer 1
    res.clipped_sums["model.layers.1.mlp.experts.down_proj"][2]  # expert 2's clipped sum

    # Your own loop: one record at a time, plain autograd.
    params = dict(engine.group_map.params)
    for r in range(4):
        one = {k: v[r:r + 1] for k, v in batch.items()}
        loss = torch.nn.functional.cross_entropy(model(input_ids=one["input_ids"],
                                                       attention_mask=one["attention_mask"]).logits,
                                                 one["labels"])
        grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()), allow_unused=True)))
        shared = [grads[s.name] for s in engine.group_map.groups[GroupKey.shared()] if grads[s.name] is not None]
        norm = torch.sqrt(sum(g.pow(2).sum() for g in shared))
        assert torch.allclose(norm, res.norms[GroupKey.shared()][r])

(``raptor.per_sample.reference.reference_compute`` does this for every group, with owner masking
and clipping, and ``raptor.audit.engine_check.compare`` reports the maximum relative errors.)
"""

from raptor.per_sample.engine import EngineResult, PerRecordEngine, cross_entropy_per_record
from raptor.roles.groups import GroupKey, GroupMap, ParamSlice

__all__ = ["EngineResult", "GroupKey", "GroupMap", "ParamSlice", "PerRecordEngine", "cross_entropy_per_record"]
