"""Experiment machinery above the trainer: resumable grids, matched tuning, reports.

Nothing here is part of the DP mechanism; it composes library calls (never the CLI through a
subprocess) and writes what they return.
"""
