"""raptor.cli."""
