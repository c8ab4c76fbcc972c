"""raptor.data."""
