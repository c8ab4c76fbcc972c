"""What the bad-input sweeps of the CLI share (test_bad_inputs, test_bad_inputs_26): 60 labelled
sentences, their TSV, and the flags of a one-step run on a tiny model."""

from __future__ import annotations

ROWS = [(f"{w} movie {v} plot", i % 2) for i, (w, v) in
        enumerate(zip(["good", "bad", "great", "awful", "fine", "poor"] * 10, ["nice", "dull", "fun"] * 20))]


def tsv(rows, header="sentence\tlabel"):
    return header + "\n" + "".join("\t".join(map(str, r)) + "\n" for r in rows)


GOOD_TSV = tsv(ROWS)
TINY = ["--vocab-size", "60", "--max-length", "12", "--hidden-size", "16", "--micro-batch-size", "8",
        "--no-progress", "--steps", "1", "--seed", "1", "--batch-size", "8", "--epsilon", "4"]
