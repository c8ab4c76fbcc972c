"""Private instruction-style fine-tuning of a tiny causal MoE in your own PyTorch loop.

    python examples/own_loop_causal_lm.py --family qwen2_moe --steps 20

Everything the data side needs is written here, as a user would write it: the records (an
instruction and a response each), the collator (prompt then response, right-padded, the prompt and
the padding masked with -100 in the labels) and the per-record loss (the mean next-token
cross-entropy over the response tokens of each record). raptor's own-loop path
(``raptor.PrivacyEngine``) takes them as they are: Poisson batches, per-record gradients clipped per
group (a shared group and one per expert), per-expert noise, the ledger.

The loss contract (raptor.integrations.losses): record r's loss depends on record r only. Here each
record's loss is the mean over ITS OWN response tokens, which is a per-record loss; a mean over all
response tokens of the batch would divide by a count of the private batch and couple the records
(raptor refuses it: it checks the loss on public records at once and one at a time).

The model is a tiny random Qwen2-MoE (or Mixtral) and the tokenizer is trained on the public
prompts, so the numbers show the mechanics, not a useful model.
"""

from __future__ import annotations

import argparse
import random

import torch

import raptor
from raptor.data import train_wordpiece
from raptor.moe.causal import build_causal_lm
from raptor.moe.models import TinySize

IGNORE = -100  # the label of a token that is not predicted (prompt and padding)
OPPOSITES = {"good": "bad", "hot": "cold", "up": "down", "big": "small", "fast": "slow", "light": "dark",
             "early": "late", "open": "closed", "full": "empty", "young": "old"}


def make_records(n: int, seed: int) -> list[dict]:
    """Instruction records: ``{"instruction": ..., "response": ...}``."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        word = rng.choice(sorted(OPPOSITES))
        if rng.random() < 0.5:
            out.append({"instruction": f"opposite of {word} ?", "response": OPPOSITES[word]})
        else:
            out.append({"instruction": f"repeat {word} twice", "response": f"{word} {word}"})
    return out


class InstructionCollator:
    """Prompt + response token ids, right-padded; labels are the response tokens, -100 elsewhere."""

    def __init__(self, tokenizer, max_length: int = 24):
        self.tok, self.max_length = tokenizer, max_length
        self.pad = tokenizer.pad_token_id

    def encode(self, record: dict) -> tuple[list[int], list[int]]:
        prompt = self.tok(record["instruction"] + " :", add_special_tokens=False)["input_ids"]
        answer = self.tok(record["response"], add_special_tokens=False)["input_ids"] + [self.tok.sep_token_id]
        ids = (prompt + answer)[: self.max_length]
        labels = ([IGNORE] * len(prompt) + answer)[: self.max_length]
        return ids, labels

    def __call__(self, records: list[dict]) -> dict[str, torch.Tensor]:
        pairs = [self.encode(r) for r in records]
        T = max((len(ids) for ids, _ in pairs), default=1)
        input_ids = torch.full((len(pairs), T), self.pad, dtype=torch.long)
        labels = torch.full((len(pairs), T), IGNORE, dtype=torch.long)
        mask = torch.zeros((len(pairs), T), dtype=torch.long)
        for i, (ids, lab) in enumerate(pairs):
            input_ids[i, : len(ids)] = torch.tensor(ids)
            labels[i, : len(lab)] = torch.tensor(lab)
            mask[i, : len(ids)] = 1
        return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


def response_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-record loss [B]: each record's mean next-token cross-entropy over its own response tokens."""
    pred, target = logits[:, :-1].float(), labels[:, 1:]
    nll = torch.nn.functional.cross_entropy(pred.transpose(1, 2), target, ignore_index=IGNORE, reduction="none")
    tokens = (target != IGNORE).sum(dim=1).clamp(min=1)
    return nll.sum(dim=1) / tokens


def held_out_loss(model, collate, records: list[dict]) -> float:
    """The mean response loss on held-out records (not private: not the training data)."""
    with torch.no_grad():
        batch = collate(records)
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        return float(response_loss(logits, batch["labels"]).mean())


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="qwen2_moe", choices=["qwen2_moe", "mixtral"])
    parser.add_argument("--records", type=int, default=200, help="private training records")
    parser.add_argument("--steps", type=int, default=20, help="planned private updates")
    parser.add_argument("--batch-size", type=int, default=16, help="expected Poisson batch size B")
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--seed", type=int, default=None, help="a seeded, NOT secure, run (default: secure)")
    args = parser.parse_args(argv)

    private, public, held_out = make_records(args.records, 1), make_records(32, 2), make_records(16, 3)
    texts = [f"{r['instruction']} : {r['response']}" for r in public]  # the tokenizer sees public text only
    tok = train_wordpiece(texts * 4, vocab_size=80)
    model = build_causal_lm(args.family, size=TinySize(vocab_size=len(tok), num_experts=4, top_k=2),
                            generator=torch.Generator().manual_seed(args.seed if args.seed is not None else 0))
    collate = InstructionCollator(tok)
    loader = torch.utils.data.DataLoader(private, batch_size=args.batch_size, collate_fn=collate)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)

    engine = raptor.PrivacyEngine(method="raptor", target_epsilon=args.epsilon, steps=args.steps,
                                  batch_size=args.batch_size, public=public, seed=args.seed, micro_batch_size=8)
    pmodel, optimizer, loader = engine.make_private(model=model, optimizer=optimizer, data_loader=loader,
                                                    loss_fn=response_loss)
    before = held_out_loss(pmodel.module, collate, held_out)
    for batch in loader:  # the planned Poisson batches
        pmodel(**batch).backward()
        optimizer.step()
        optimizer.zero_grad()
    after = held_out_loss(pmodel.module, collate, held_out)
    out = {"steps": engine.steps_done, "epsilon": engine.epsilon(), "delta": engine.delta,
           "held_out_loss_before": before, "held_out_loss_after": after}
    print(f"{args.family}: {out['steps']} private updates, epsilon {out['epsilon']:.3f} at delta {out['delta']:.2e}; "
          f"held-out response loss {before:.3f} -> {after:.3f}")
    return out


if __name__ == "__main__":
    main()
