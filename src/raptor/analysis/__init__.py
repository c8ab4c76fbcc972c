"""The analysis behind the experiments (the scripts live in the repository's ``experiments/``):
resumable grids and matched tuning (:mod:`raptor.analysis.grid`), the paper's claims checked on
their results (:mod:`raptor.analysis.claims`), the gradient-composition and failure-mode
diagnostics, and the reports.

Nothing here is part of the DP mechanism; it composes library calls (never the CLI through a
subprocess) and writes what they return.
"""
