"""Embedding functions for the summary collection: the offline MiniLM (the default) and any
OpenAI-compatible /v1/embeddings endpoint."""
