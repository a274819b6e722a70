"""The pure domain core: no Kubernetes, no Chroma, no network, no clock unless passed in.
docs/architecture.md maps its modules."""
