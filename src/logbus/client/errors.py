"""What the blocking client raises."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class KafkaError(RuntimeError):
    """A request failed: connection trouble or an error code the caller cannot handle."""


class RefusedError(KafkaError):
    """The broker answered with an error code (`code`): a refusal the caller may tell apart."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class AuthenticationError(KafkaError):
    """The TLS handshake failed or the broker refused the SASL login (Kafka's AuthenticationException):
    trying again with the same settings cannot help, so callers that retry lost connections do not."""
