"""SaslHandshake (key 17): serves v0-v1, as Kafka 4.1 advertises them.

The client names its mechanism; the answer lists the ones enabled on the connection's listener
(`listener.name.<listener>.sasl.enabled.mechanisms`, else `sasl.enabled.mechanisms`).
v1 announces the tokens in SaslAuthenticate requests; v0 the legacy flow, raw length-prefixed
tokens without a Kafka header. A mechanism not enabled is UNSUPPORTED_SASL_MECHANISM and the
connection closes after the answer. On an authenticated connection v1 begins a KIP-368
re-authentication (same mechanism, or ILLEGAL_SASL_STATE and a close). On a listener without
SASL the answer is ILLEGAL_SASL_STATE, as Kafka's KafkaApis gives it.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import IllegalSaslStateError, KafkaApiError
from ...protocol.codec import make, response_class
from ..context import RequestContext

API_KEY = 17
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    cls = response_class(API_KEY, ctx.api_version)
    if ctx.sasl is None:
        raise IllegalSaslStateError("SaslHandshake on a listener without SASL")
    try:
        ctx.sasl.handshake(request.mechanism, ctx.api_version)
    except KafkaApiError as refused:
        return make(cls, error_code=refused.code, mechanisms=ctx.sasl.enabled_mechanisms)
    return make(cls, error_code=ErrorCode.none, mechanisms=ctx.sasl.enabled_mechanisms)
