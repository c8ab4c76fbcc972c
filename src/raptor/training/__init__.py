"""raptor.training."""
