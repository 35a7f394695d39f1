"""What an API handler gets besides its request: the broker and who is asking."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from ..security.sasl_session import SaslSession
    from .broker import Broker


@dataclass(frozen=True, slots=True)
class RequestContext:
    broker: Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    sendfile: bool = False  # large fetched ranges may leave by sendfile on this connection
    close: Callable[[], None] | None = None  # closes this request's connection
    principal: KafkaPrincipal = ANONYMOUS  # who the connection authenticated as
    listener_name: str = "PLAINTEXT"  # the listener the connection came in on
    sasl: SaslSession | None = None  # the connection's SASL state, on a SASL listener

    def close_connection(self) -> None:
        if self.close is not None:
            self.close()


@dataclass(frozen=True, slots=True)
class DeferredResponse:
    """A response that completes later (a produce with acks=all waiting for the ISR). The
    connection goes on with its next requests meanwhile and still answers in request order, so
    a producer's pipelined requests wait for replication together, not one after another."""

    result: Awaitable[Any]


@dataclass(frozen=True, slots=True)
class RawResponse:
    """A response body a handler encoded itself, as chunks sent in order without joining."""

    chunks: list[bytes | memoryview]
