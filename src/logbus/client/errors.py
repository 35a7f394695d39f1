"""What the blocking client raises."""

from __future__ import annotations


class KafkaError(RuntimeError):
    """A request failed: connection trouble or an error code the caller cannot handle."""


class AuthenticationError(KafkaError):
    """The TLS handshake failed or the broker refused the SASL login (Kafka's AuthenticationException):
    trying again with the same settings cannot help, so callers that retry lost connections do not."""
