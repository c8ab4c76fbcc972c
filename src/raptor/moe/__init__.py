"""raptor.moe."""
