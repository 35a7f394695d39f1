"""DescribeTransactions (key 65): serves v0.

Per transactional id, as its coordinator knows it: state (Kafka's names: Empty, Ongoing,
PrepareCommit, ...), timeout, start time (-1 when no transaction runs), producer id and epoch,
and the partitions of the open transaction. NOT_COORDINATOR when another broker coordinates it,
COORDINATOR_LOAD_IN_PROGRESS while loading, TRANSACTIONAL_ID_NOT_FOUND for an unknown id.
With an authorizer, the id needs Describe (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and the
partitions listed are only those of topics the principal may Describe, as Kafka's
KafkaApis.handleDescribeTransactionsRequest filters them.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator.txn_coordinator import STATE_NAMES
from ...coordinator.txn_metadata import TxnMetadata
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorized_names, require
from ..context import RequestContext

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    states = [_state(ctx, module, transactional_id) for transactional_id in request.transactional_ids]
    return make(response_class(API_KEY, ctx.api_version), transaction_states=tuple(states))


def _state(ctx: RequestContext, module: Any, transactional_id: str) -> Any:
    try:
        require(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id)
        txn = ctx.broker.txn_coordinator.describe(transactional_id)
    except KafkaApiError as exc:
        return make(module.TransactionState, error_code=exc.code, transactional_id=transactional_id,
                    transaction_state="", transaction_timeout=datetime.timedelta(0),
                    transaction_start_time=_time(-1), producer_id=-1, producer_epoch=-1, topics=())
    return make(module.TransactionState, error_code=ErrorCode.none, transactional_id=transactional_id,
                transaction_state=STATE_NAMES[txn.status],
                transaction_timeout=datetime.timedelta(milliseconds=txn.timeout_ms),
                transaction_start_time=_time(txn.start_ms), producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch, topics=_topics(ctx, module, txn))


def _topics(ctx: RequestContext, module: Any, txn: TxnMetadata) -> tuple[Any, ...]:
    """The transaction's partitions by topic, of the topics the principal may Describe."""
    visible = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (topic for topic, _ in txn.partitions))
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(txn.partitions):
        if topic in visible:
            by_topic.setdefault(topic, []).append(index)
    return tuple(make(module.TopicData, topic=topic, partitions=tuple(ids)) for topic, ids in by_topic.items())


def _time(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
