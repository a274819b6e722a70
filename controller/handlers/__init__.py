"""kopf handlers, one module per resource. Importing this package registers them."""

from controller.handlers import summarizer, summary

__all__ = ["summarizer", "summary"]
