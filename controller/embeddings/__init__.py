"""Embedding functions: the offline MiniLM (the default) and OpenAI-compatible endpoints."""
