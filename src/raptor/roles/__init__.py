"""raptor.roles."""
