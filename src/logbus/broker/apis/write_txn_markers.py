"""WriteTxnMarkers (key 27): serves v1, the range Kafka 4.1 advertises (4.0 removed v0; v2, which
adds KIP-1228's transaction version, came with 4.2).

An inter-broker API: a transaction coordinator asks the leader of each partition of a finished
transaction to write its COMMIT or ABORT marker. Each (marker, partition) goes through
`cluster.txn_markers.write_marker` (acks=all, then the marker listeners) and is answered on its
own, with Kafka's codes: UNKNOWN_TOPIC_OR_PARTITION for a partition not hosted here,
NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, INVALID_PRODUCER_EPOCH,
TRANSACTION_COORDINATOR_FENCED, KAFKA_STORAGE_ERROR, REQUEST_TIMED_OUT after Kafka's request
timeout. Internal topics are allowed (markers land on `__consumer_offsets` too). A partition named
twice in one marker is written once, as Kafka's per-marker map of partitions does.

All writes of a request run concurrently, so one partition waiting for a slow ISR delays no other;
the answer is deferred, so the connection goes on serving the requests behind it (other
transactions' markers) meanwhile, and still answers in order.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from ...cluster.replica_manager import ReplicaManager
from ...cluster.txn_markers import MARKER_TIMEOUT_S, write_marker
from ...errors import UnknownTopicError, code_of_awaited
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation
from ..authorization import require_cluster
from ..context import DeferredResponse, RequestContext

API_KEY = 27
MIN_VERSION = 1
MAX_VERSION = 1

PartitionKey = tuple[str, int]


async def handle(ctx: RequestContext, request: Any) -> Any:
    require_cluster(ctx, AclOperation.CLUSTER_ACTION)  # brokers only, as Kafka
    return DeferredResponse(_write_all(ctx, request))


async def _write_all(ctx: RequestContext, request: Any) -> Any:
    replicas = ctx.broker.replicas
    outcomes = await asyncio.gather(*(_write_marker(replicas, marker) for marker in request.markers))
    module = response_module(API_KEY, ctx.api_version)
    return make(response_class(API_KEY, ctx.api_version), markers=tuple(
        _marker_result(module, marker, codes) for marker, codes in zip(request.markers, outcomes, strict=True)
    ))


async def _write_marker(replicas: ReplicaManager, marker: Any) -> dict[PartitionKey, ErrorCode]:
    """Each distinct partition of `marker`: written concurrently where hosted, at once
    UNKNOWN_TOPIC_OR_PARTITION where not (no task for a partition that cannot be written)."""
    keys = dict.fromkeys((topic.name, index) for topic in marker.topics for index in topic.partition_indexes)
    codes = {key: UnknownTopicError.code for key in keys if replicas.get(*key) is None}
    hosted = [key for key in keys if key not in codes]
    written = await asyncio.gather(*(
        code_of_awaited(write_marker(replicas, topic, index, marker.producer_id, marker.producer_epoch,
                                     marker.transaction_result, marker.coordinator_epoch, MARKER_TIMEOUT_S))
        for topic, index in hosted
    ))
    codes.update(zip(hosted, written, strict=True))
    return codes


def _marker_result(module: Any, marker: Any, codes: dict[PartitionKey, ErrorCode]) -> Any:
    return make(module.WritableTxnMarkerResult, producer_id=marker.producer_id, topics=tuple(
        make(module.WritableTxnMarkerTopicResult, name=topic.name, partitions=tuple(
            make(module.WritableTxnMarkerPartitionResult, partition_index=index, error_code=codes[(topic.name, index)])
            for index in topic.partition_indexes
        ))
        for topic in marker.topics
    ))
