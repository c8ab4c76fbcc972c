"""Label-word initialisation of the classification head."""

from __future__ import annotations

import pytest
import torch

from raptor.data import train_wordpiece
from raptor.data.tasks import GLUE_TASKS
from raptor.errors import ConfigError
from raptor.moe.models import TinySize, build_model
from raptor.training.setup.head_init import LABEL_WORDS, classification_head, init_head_from_label_words

CORPUS = ["a positive review", "a negative one", "yes no maybe so"] * 20


def test_every_glue_classification_task_has_one_word_per_label():
    assert set(LABEL_WORDS) == {n for n, spec in GLUE_TASKS.items() if not spec.is_regression}
    for task, words in LABEL_WORDS.items():
        assert len(words) == GLUE_TASKS[task].num_labels, task


@pytest.mark.parametrize("family", ["switch_transformers", "olmoe", "mixtral"])
def test_rows_are_scaled_normalised_mean_embeddings(family):
    tok = train_wordpiece(CORPUS, vocab_size=60, lowercase=True)
    size = TinySize(vocab_size=len(tok), hidden_size=32, num_layers=1, num_heads=2, num_experts=2, top_k=1,
                    expert_intermediate=32, max_positions=64)
    model = build_model(family, num_labels=2, generator=torch.Generator().manual_seed(0), size=size)
    init_head_from_label_words(model, tok, ["negative", "positive"], scale=0.02)
    head, emb = classification_head(model), model.get_input_embeddings().weight
    for i, word in enumerate(["negative", "positive"]):
        vec = emb[tok(word, add_special_tokens=False)["input_ids"]].mean(0)
        torch.testing.assert_close(head.weight[i], 0.02 * vec / vec.norm())
    assert head.bias is None or bool((head.bias == 0).all())


def test_wrong_number_of_words_is_a_clear_error():
    tok = train_wordpiece(CORPUS, vocab_size=60, lowercase=True)
    size = TinySize(vocab_size=len(tok), hidden_size=32, num_layers=1, num_heads=2, num_experts=2, top_k=1,
                    expert_intermediate=32, max_positions=64)
    model = build_model("switch_transformers", num_labels=2, generator=torch.Generator().manual_seed(0), size=size)
    with pytest.raises(ConfigError, match="one word per label"):
        init_head_from_label_words(model, tok, ["yes", "no", "maybe"])


def test_regression_head_is_refused_with_a_clear_message():
    tok = train_wordpiece(CORPUS, vocab_size=60, lowercase=True)
    size = TinySize(vocab_size=len(tok), hidden_size=32, num_layers=1, num_heads=2, num_experts=2, top_k=1,
                    expert_intermediate=32, max_positions=64)
    model = build_model("switch_transformers", num_labels=1, generator=torch.Generator().manual_seed(0), size=size)
    before = classification_head(model).weight.clone()
    with pytest.raises(ConfigError, match="--head-init label-words does not apply to regression.*--head-init random"):
        init_head_from_label_words(model, tok, ["score"])
    assert torch.equal(classification_head(model).weight, before)
