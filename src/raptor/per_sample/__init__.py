"""raptor.per_sample."""
