"""raptor.accounting."""
