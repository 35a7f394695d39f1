"""AddOffsetsToTxn (key 25): serves v0–v4.

Adds the group's `__consumer_offsets` partition to the producer's transaction, so that the
TxnOffsetCommit that follows (sent to the group coordinator) is committed or aborted with it.
Errors as AddPartitionsToTxn's; PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator.store import TOPIC as OFFSETS_TOPIC
from ...errors import KafkaApiError, producer_fenced_as
from ...protocol.codec import make, response_class
from ...security.acl import AclOperation, ResourceType
from ..authorization import require
from ..context import RequestContext

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 4
PRODUCER_FENCED_FROM = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    cls = response_class(API_KEY, ctx.api_version)
    if not request.group_id:
        return make(cls, error_code=ErrorCode.invalid_group_id)
    require(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
    require(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id)
    groups = ctx.broker.group_coordinator
    try:
        await groups.store.create()
        partition = (OFFSETS_TOPIC, groups.partition_for(request.group_id))
        await ctx.broker.txn_coordinator.add_partitions(
            request.transactional_id, request.producer_id, request.producer_epoch, frozenset([partition]))
    except KafkaApiError as exc:
        return make(cls, error_code=producer_fenced_as(exc.code, ctx.api_version, PRODUCER_FENCED_FROM))
    return make(cls, error_code=ErrorCode.none)
