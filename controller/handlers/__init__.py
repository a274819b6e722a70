"""kopf handlers, one module per resource; importing this package registers them."""

from controller.handlers import session_summarizer, session_summary  # noqa: F401
