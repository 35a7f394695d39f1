"""ElectLeaders (key 43): serves v0–v2.

Preferred (election_type 0) or unclean (1, v1+) election for the partitions named, or for every
partition when `topic_partitions` is null. The decision is the metadata store's: on one broker
every partition answers ELECTION_NOT_NEEDED (it already leads), as a one-broker Kafka answers; in
a cluster the controller elects and the answer comes once the new leader is in the metadata.
Per partition: none, ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE,
ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION or REQUEST_TIMED_OUT. A request the
store cannot hand to the controller (ZooKeeper down) gets the store's code for every partition
and at the top level. v0 has no top-level error code.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation
from ..authorization import require_cluster
from ..context import RequestContext

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2

UNCLEAN = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    metadata = ctx.broker.metadata
    if request.topic_partitions is None:
        wanted = [(name, index) for name, topic in metadata.topics().items() for index in range(len(topic.partitions))]
    else:
        wanted = [(topic.topic, index) for topic in request.topic_partitions for index in topic.partitions]
    unclean = getattr(request, "election_type", 0) == UNCLEAN
    try:
        require_cluster(ctx, AclOperation.ALTER)
        results = await metadata.elect_leaders(wanted, unclean) if wanted else {}
    except KafkaApiError as exc:
        return _answer(ctx, module, dict.fromkeys(wanted, exc.code), exc.code)
    return _answer(ctx, module, results, ErrorCode.none)


def _answer(ctx: RequestContext, module: Any, results: dict[tuple[str, int], int | None], error: ErrorCode) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for (name, index), code in results.items():
        partition_error = ErrorCode.none if code is None else ErrorCode(code)
        by_topic.setdefault(name, []).append(make(
            module.PartitionResult, partition_id=index, error_code=partition_error,
            error_message=None if code is None else partition_error.name.upper()))
    return make(response_class(API_KEY, ctx.api_version), error_code=error, replica_election_results=tuple(
        make(module.ReplicaElectionResult, topic=name, partition_result=tuple(partitions))
        for name, partitions in by_topic.items()
    ))
