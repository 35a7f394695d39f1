"""EndTxn (key 26): serves v0–v5.

Commits or aborts the producer's transaction: answered once the decision is written to
`__transaction_state`; the coordinator then writes the markers to every partition of the
transaction and records its completion (txn_coordinator.py). Retrying a decision already
made succeeds (CONCURRENT_TRANSACTIONS while it completes); the opposite one, or ending a
transaction that was never started, is INVALID_TXN_STATE. PRODUCER_FENCED from v2,
INVALID_PRODUCER_EPOCH before. The v5 fields of transaction version 2 (a new epoch with every
commit) stay at their defaults: this coordinator speaks transaction version 1.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import KafkaApiError, producer_fenced_as
from ...protocol.codec import make, response_class
from ...security.acl import AclOperation, ResourceType
from ..authorization import require
from ..context import RequestContext

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 5
PRODUCER_FENCED_FROM = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    cls = response_class(API_KEY, ctx.api_version)
    require(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
    try:
        await ctx.broker.txn_coordinator.end_txn(request.transactional_id, request.producer_id,
                                                 request.producer_epoch, request.committed)
    except KafkaApiError as exc:
        return make(cls, error_code=producer_fenced_as(exc.code, ctx.api_version, PRODUCER_FENCED_FROM))
    return make(cls, error_code=ErrorCode.none)
