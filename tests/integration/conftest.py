from tests.integration.harness import harness, shared_operator_left_quiet

__all__ = ["harness", "shared_operator_left_quiet"]
