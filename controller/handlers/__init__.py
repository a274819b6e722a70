"""kopf handlers, one module per resource, and the indexes they look things up in.
Importing this package registers them."""

from controller.handlers import indexes, session_summarizer, session_summary

__all__ = ["indexes", "session_summarizer", "session_summary"]
