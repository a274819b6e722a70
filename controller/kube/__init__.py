"""The Kubernetes side (blocking calls): the API client, the per-session claim objects, and
who the active replica is (kopf peering)."""
