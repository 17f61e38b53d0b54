"""Trace ingest: profiler files -> one columnar trace model -> steps, budgets, observations."""
