"""The Chroma store: the only code that talks to Chroma."""
