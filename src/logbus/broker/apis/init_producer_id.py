"""InitProducerId (key 22): serves v0–v5.

Without a transactional id (idempotent producers) every call gets a fresh producer id at
epoch 0, as Kafka does. With one, the transaction coordinator answers (txn_coordinator.py):
the id's producer id at its next epoch, fencing the previous producer; an open transaction of
that producer is aborted first (CONCURRENT_TRANSACTIONS meanwhile, which clients retry). v3+
may name the current producer id and epoch (KIP-360). PRODUCER_FENCED is answered from v4;
older versions get INVALID_PRODUCER_EPOCH.

An id is handed out only once it is persisted (ids are never reused after a restart); when the
metadata store cannot write (e.g. a full disk) the answer is COORDINATOR_LOAD_IN_PROGRESS, which
is what Kafka answers while its next producer id block is not available: retriable for
librdkafka, kafka-python and aiokafka (KAFKA_STORAGE_ERROR is fatal for kafka-python's
InitProducerId handler).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import KafkaApiError, MetadataWriteError, producer_fenced_as
from ...protocol.codec import make, response_class
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorize_by_resource_type, require, require_cluster
from ..context import RequestContext

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5
PRODUCER_FENCED_FROM = 4


async def handle(ctx: RequestContext, request: Any) -> Any:
    cls = response_class(API_KEY, ctx.api_version)
    _authorize(ctx, request.transactional_id)
    try:
        if request.transactional_id is None:
            producer_id, epoch = await ctx.broker.metadata.allocate_producer_id(), 0
        else:
            timeout_ms = round(request.transaction_timeout.total_seconds() * 1000)
            producer_id, epoch = await ctx.broker.txn_coordinator.init_producer_id(
                request.transactional_id, timeout_ms, getattr(request, "producer_id", -1),
                getattr(request, "producer_epoch", -1))
    except MetadataWriteError:  # no producer id block: Kafka's answer, retriable for every client
        return make(cls, error_code=ErrorCode.coordinator_load_in_progress, producer_id=-1, producer_epoch=-1)
    except KafkaApiError as exc:
        return make(cls, error_code=producer_fenced_as(exc.code, ctx.api_version, PRODUCER_FENCED_FROM),
                    producer_id=-1, producer_epoch=-1)
    return make(cls, error_code=ErrorCode.none, producer_id=producer_id, producer_epoch=epoch)


def _authorize(ctx: RequestContext, transactional_id: str | None) -> None:
    """As Kafka: Write on the transactional id; an idempotent producer needs IdempotentWrite on
    the cluster or Write on some topic (KIP-679)."""
    if transactional_id is not None:
        require(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)
    elif not authorize_by_resource_type(ctx, AclOperation.WRITE, ResourceType.TOPIC):
        require_cluster(ctx, AclOperation.IDEMPOTENT_WRITE)
