from tests.integration.harness import harness

__all__ = ["harness"]
