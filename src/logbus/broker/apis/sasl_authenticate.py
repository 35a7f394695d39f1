"""SaslAuthenticate (key 36): serves v0-v2, as Kafka 4.1 advertises them.

One token of the mechanism's exchange each way (after SaslHandshake v1). v1+ answers, on success,
the session lifetime (`connections.max.reauth.ms`, KIP-368; 0: no expiry). A refusal is
SASL_AUTHENTICATION_FAILED with Kafka's message, answered `connection.failed.authentication.delay.ms`
later (only this connection waits: its requests are processed in order), then the connection
closes. The token is checked in a worker thread: PLAIN derives the password (PBKDF2: 2.6 ms at
4096 iterations of SHA-256, 20 ms at 16384 of SHA-512), which would otherwise stall every
connection while a client logs in. On a listener without SASL, or once authenticated, ILLEGAL_SASL_STATE as in KafkaApis
(the connection stays).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import AuthenticationFailed, IllegalSaslStateError, KafkaApiError
from ...protocol.codec import make, response_class
from ...security.sasl_session import AFTER_AUTHENTICATION
from ..context import RequestContext

log = logging.getLogger(__name__)

API_KEY = 36
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    cls = response_class(API_KEY, ctx.api_version)
    if ctx.sasl is None:
        raise IllegalSaslStateError(AFTER_AUTHENTICATION)
    try:
        answer = await asyncio.to_thread(ctx.sasl.authenticate, request.auth_bytes)
    except KafkaApiError as refused:
        if isinstance(refused, AuthenticationFailed):
            log.info("failed authentication from %s: %s", ctx.client_host, refused.message)  # as Kafka logs it
            await asyncio.sleep(ctx.broker.config["connection.failed.authentication.delay.ms"] / 1000)
        return make(cls, error_code=refused.code, error_message=refused.message, auth_bytes=b"",
                    session_lifetime=timedelta(0))
    return make(cls, error_code=ErrorCode.none, error_message=None, auth_bytes=answer,
                session_lifetime=timedelta(milliseconds=ctx.sasl.session_lifetime_ms))
