"""The status the operator writes on its resources, from the typed API (controller.api). Pure."""
