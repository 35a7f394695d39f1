"""The one error type an API handler raises to answer with a Kafka error code.

Anything below the handlers (topic rules, the offsets store, config validation) that refuses a
request raises `KafkaApiError(code, message)`; the handler puts `code` and `message` into its
response for that topic, partition or group. An exception of any other type escaping a handler
is a bug: the server logs it and closes that one connection, and the fuzz harness reports it.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class KafkaApiError(Exception):
    """A refusal with the error code and message the client gets."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message if message is not None else code.name)
        self.code = code
        self.message = message
