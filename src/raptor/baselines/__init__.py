"""raptor.baselines."""
