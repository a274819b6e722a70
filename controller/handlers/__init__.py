"""kopf handlers, one module per resource, and the index they look things up in.
Importing this package registers them."""

from controller.handlers import session_summarizer, session_summary  # noqa: F401
