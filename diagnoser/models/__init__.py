"""Pydantic models: the only contract between inputs, the bound, the engine and renderers."""
