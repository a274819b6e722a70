"""The status the operator writes on its resources, computed from the typed API (controller.api)
and the facts a handler gathered. Pure: no cluster, no store; beside the API, not in the core,
which knows nothing of the resources."""
