"""raptor.mechanisms."""
