"""kopf handlers, one module per resource, and the indexes they look things up in.
Importing this package registers them."""

from controller.handlers import indexes, summarizer, summary

__all__ = ["indexes", "summarizer", "summary"]
