"""Domain adapters."""
