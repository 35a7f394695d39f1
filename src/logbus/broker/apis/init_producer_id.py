"""InitProducerId (key 22): serves v0–v5.

Without a transactional id (idempotent producers) every call gets a fresh producer id at
epoch 0, as Kafka does. Transactions are not served yet: a request with a transactional id
gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED, a non-retriable error that tells the client to
stop rather than retry forever.

An id is handed out only once it is persisted (ids are never reused after a restart); when the
metadata store cannot write (e.g. a full disk) the answer is COORDINATOR_LOAD_IN_PROGRESS, which
is what Kafka answers while its next producer id block is not available: retriable for
librdkafka, kafka-python and aiokafka (KAFKA_STORAGE_ERROR is fatal for kafka-python's
InitProducerId handler).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...cluster.metadata import MetadataWriteError
from ...protocol.codec import make, response_class
from ..context import RequestContext

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> Any:
    cls = response_class(API_KEY, ctx.api_version)
    if request.transactional_id is not None:
        return make(cls, error_code=ErrorCode.transactional_id_authorization_failed,
                    producer_id=-1, producer_epoch=-1)
    try:
        producer_id = await ctx.broker.metadata.allocate_producer_id()
    except MetadataWriteError:
        return make(cls, error_code=ErrorCode.coordinator_load_in_progress, producer_id=-1, producer_epoch=-1)
    return make(cls, error_code=ErrorCode.none, producer_id=producer_id, producer_epoch=0)
