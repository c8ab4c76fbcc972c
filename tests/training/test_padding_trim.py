"""Less padding (issue 33, item 5): length-sorted micro-batches trimmed of their trailing padding give
the clipped sums, norms and owners of the padded batch (the fast path against the plain one)."""

from __future__ import annotations

import pytest
import torch

from raptor.audit.engine_check import to_float64
from raptor.moe.adapters import freeze_untrained_experts
from raptor.moe.models import build_model
from raptor.per_sample.engine import PerRecordEngine
from raptor.training.step.micro_batch import length_sorted_chunks, trim_padding, trimmable


def _records(n: int, T: int, seed: int, vocab: int = 512) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (n, T), generator=g)
    lengths = torch.randint(1, T // 2 + 1, (n,), generator=g)  # every record shorter than half of T
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    return {"input_ids": ids * mask, "attention_mask": mask, "labels": torch.randint(0, 2, (n,), generator=g)}


@pytest.mark.parametrize("family", ["bert_moe", "switch_transformers", "olmoe"])
def test_trimmed_batch_gives_the_padded_batch_s_results(family):
    model = to_float64(build_model(family, generator=torch.Generator().manual_seed(0)))
    freeze_untrained_experts(model, [1])
    engine = PerRecordEngine(model, trained_layers=[1], grouping="roles")
    batch = _records(6, 16, seed=1)
    trimmed = trim_padding(batch)
    assert trimmed["input_ids"].shape[1] < batch["input_ids"].shape[1]  # something was cut
    clip = {k: 0.05 for k in engine.group_keys}  # clipping active
    full, cut = engine.compute(batch, clip), engine.compute(trimmed, clip)
    for name, value in full.clipped_sums.items():
        torch.testing.assert_close(cut.clipped_sums[name], value, rtol=1e-9, atol=1e-12)
    for key in engine.group_keys:
        torch.testing.assert_close(cut.norms[key], full.norms[key], rtol=1e-9, atol=1e-12)
    for layer, owners in full.owners.items():
        assert torch.equal(cut.owners[layer], owners)


def test_length_sorted_chunks_keep_every_sampled_record_once():
    lengths = torch.tensor([5, 1, 3, 3, 9, 2, 7])
    idx = torch.tensor([6, 0, 2, 4, 1])
    chunks = length_sorted_chunks(idx, lengths, 2)
    flat = torch.cat(chunks)
    assert sorted(flat.tolist()) == sorted(idx.tolist())
    assert [lengths[i].item() for i in flat] == sorted(lengths[idx].tolist())
    assert [len(c) for c in chunks] == [2, 2, 1]
    assert [c.tolist() for c in length_sorted_chunks(idx, None, 2)] == [[6, 0], [2, 4], [1]]


def test_only_token_classification_records_are_trimmed():
    batch = _records(3, 8, seed=2)
    assert trimmable(batch)
    assert not trimmable({**batch, "labels": torch.zeros(3, 8, dtype=torch.long)})  # per-token labels
    assert not trimmable({**batch, "pixel_values": torch.zeros(3, 1)})
    empty = {k: v.clone() for k, v in batch.items()}
    empty["attention_mask"].zero_()
    assert trim_padding(empty)["input_ids"].shape[1] == 1  # at least one column stays


def test_a_trainer_step_releases_the_same_sums_with_and_without_trimming():
    from raptor.training.config import OptimConfig, PerformanceConfig, PrivacyConfig, TrainConfig
    from raptor.training.run.assemble import build_trainer

    data = _records(40, 16, seed=3)
    sums = []
    for trim in (True, False):
        model = build_model("bert_moe", generator=torch.Generator().manual_seed(0)).double()
        config = TrainConfig(method="raptor", steps=1, batch_size=20, seed=0, max_length=16, layers=(1,),
                             privacy=PrivacyConfig(epsilon=None, noise_multipliers=(1.0, 1.0), delta=1e-5,
                                                   secure_rng=False),
                             performance=PerformanceConfig(micro_batch_size=8), optim=OptimConfig())
        trainer = build_trainer(config, model, train=data, validation=None, public=_records(16, 16, seed=4))
        if not trim:
            trainer._lengths = None
        idx = torch.arange(0, 40, 2)
        sums.append(trainer._clipped_sums(idx)[0])
    assert set(sums[0]) == set(sums[1])
    for name, value in sums[1].items():  # the same records summed in another order: float32 rounding only
        scale = float(value.abs().max()) or 1.0
        torch.testing.assert_close(sums[0][name], value, rtol=1e-5, atol=1e-6 * scale)
