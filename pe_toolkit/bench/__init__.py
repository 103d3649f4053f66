"""The benchmark harness (placeholder for the verdict rule; the harness lands beside it)."""
