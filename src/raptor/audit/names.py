"""The mechanism audit's choice lists, importable without torch (``raptor audit --help`` starts fast).

:mod:`raptor.audit.mechanism` imports them from here, so there is one source."""

from __future__ import annotations

#: the mechanism variants: ``correct`` and the deliberately broken ones, whose bound should exceed the claim
VARIANTS: tuple[str, ...] = (
    "correct", "noise-4x-too-small", "realized-count-denominator", "non-owner-update", "per-stream-sum",
)
#: the released groups the attacker scores
STREAMS: tuple[str, ...] = ("joint", "shared", "expert")
#: The audit's noise stream: a seeded torch generator, or the AES-256-CTR stream of secure runs
#: (:class:`raptor.mechanisms.AesCtrGenerator`, keyed from the OS: its draws are not reproducible,
#: so an ``aes-ctr`` audit's bound varies a little from run to run).
GENERATORS: tuple[str, ...] = ("torch", "aes-ctr")
