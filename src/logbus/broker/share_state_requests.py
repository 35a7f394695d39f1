"""What the share coordinator's RPCs (keys 83-87, KIP-932) have in common: brokers only
(ClusterAction on the cluster, else CLUSTER_AUTHORIZATION_FAILED for every partition, as Kafka),
each partition of the request answered on its own by the share coordinator
(coordinator/share_coordinator.py), concurrently, its KafkaApiError as that partition's error
code (NOT_COORDINATOR when this broker does not lead the share-partition's `__share_group_state`
partition, COORDINATOR_LOAD_IN_PROGRESS while it loads, the fencing codes). The answer is
deferred: writes wait for the ISR while the connection serves the requests behind them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ..coordinator.share_records import ShareKey
from ..errors import KafkaApiError
from ..protocol.codec import make, response_class, response_module
from ..security.acl import AclOperation
from .authorization import authorize_cluster
from .context import DeferredResponse, RequestContext

PartitionAnswer = Callable[[ShareKey, Any], Awaitable[dict[str, Any]]]  # -> the partition result's fields


def serve(ctx: RequestContext, request: Any, api_key: int, result_name: str, answer: PartitionAnswer) -> Any:
    """The response to a share coordinator request: `answer` per partition."""
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        async def refused(_key: ShareKey, _partition: Any) -> dict[str, Any]:
            raise KafkaApiError(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
        answer = refused
    return DeferredResponse(_answer_all(ctx, request, api_key, result_name, answer))


async def _answer_all(ctx: RequestContext, request: Any, api_key: int, result_name: str,
                      answer: PartitionAnswer) -> Any:
    module = response_module(api_key, ctx.api_version)
    results = []
    for topic in request.topics:
        partitions = await asyncio.gather(*(
            _partition(module, ShareKey(request.group_id, topic.topic_id, p.partition), p, answer)
            for p in topic.partitions))
        results.append(make(getattr(module, result_name), topic_id=topic.topic_id, partitions=tuple(partitions)))
    return make(response_class(api_key, ctx.api_version), results=tuple(results))


async def _partition(module: Any, key: ShareKey, partition: Any, answer: PartitionAnswer) -> Any:
    try:
        if key.topic_id is None:
            raise KafkaApiError(ErrorCode.invalid_request, "A share-partition needs a topic id.")
        fields = await answer(key, partition)
    except KafkaApiError as exc:
        fields = {"error_code": exc.code, "error_message": exc.message, "state_epoch": -1, "leader_epoch": -1,
                  "start_offset": -1, "state_batches": ()}
    else:
        fields = {"error_code": ErrorCode.none, "error_message": None, **fields}
    return make(module.PartitionResult, partition=key.partition, **fields)
