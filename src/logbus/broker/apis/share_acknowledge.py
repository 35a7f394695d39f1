"""ShareAcknowledge (key 79): serves v1–v2 (Kafka 4.2's range; v0 was KIP-932's early access).

A share group member acknowledges records it acquired through ShareFetch, outside a fetch
(accept, release, reject, a gap; v2 also renew: the lock is extended and the answer carries the
lock duration). It needs the member's open share session: the next epoch continues it, -1 closes
it after the acknowledgements apply (its remaining acquired records are released); epoch 0 is
INVALID_SHARE_SESSION_EPOCH, no session SHARE_SESSION_NOT_FOUND (for the request). Each
partition answers its acknowledgements' outcome once written to the share coordinator (see
broker/share_requests.py). Needs READ on the
group (GROUP_AUTHORIZATION_FAILED) and on each topic (TOPIC_AUTHORIZATION_FAILED), as Kafka.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import require
from ..context import RequestContext
from ..share_requests import (
    acknowledge_all,
    check_request,
    count_requests,
    current_leader,
    finish,
    node_endpoints,
    readable_topics,
    session_of,
)
from ..share_sessions import INITIAL_EPOCH

API_KEY = 79
MIN_VERSION = 1
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    try:
        require(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id or "")
        check_request(request.group_id, request.member_id)
        if request.share_session_epoch == INITIAL_EPOCH:
            raise KafkaApiError(ErrorCode.invalid_share_session_epoch,
                                "A share session cannot be opened by a ShareAcknowledge request.")
        session = session_of(ctx, request.group_id, request.member_id, request.share_session_epoch, ())
    except KafkaApiError as exc:
        return _failed(ctx, exc.code, exc.message)
    module = response_module(API_KEY, ctx.api_version)
    readable = readable_topics(ctx, {topic.topic_id for topic in request.topics})
    topics = []
    not_leader = []
    acks = {(topic.topic_id, part.partition_index): part.acknowledgement_batches
            for topic in request.topics for part in topic.partitions}
    outcomes = await acknowledge_all(ctx, session.group_id, session.member_id, acks, readable)
    for topic in request.topics:
        answers = []
        for part in topic.partitions:
            outcome = outcomes[(topic.topic_id, part.partition_index)]
            leader = current_leader(ctx, module, topic.topic_id, part.partition_index)
            if outcome.code == ErrorCode.not_leader_or_follower and leader.leader_id >= 0:
                not_leader.append(leader.leader_id)
            answers.append(make(module.PartitionData, partition_index=part.partition_index, error_code=outcome.code,
                                error_message=outcome.message, current_leader=leader))
        topics.append(make(module.ShareAcknowledgeTopicResponse, topic_id=topic.topic_id, partitions=tuple(answers)))
    count_requests(ctx, "acknowledgement", outcomes.items())
    finish(ctx, session, request.share_session_epoch)
    lock_ms = ctx.broker.share_partitions.settings(session.group_id).config.lock_duration_ms
    return make(response_class(API_KEY, ctx.api_version), error_code=ErrorCode.none, responses=tuple(topics),
                node_endpoints=node_endpoints(ctx, module, not_leader),
                acquisition_lock_timeout=timedelta(milliseconds=lock_ms))


def _failed(ctx: RequestContext, code: ErrorCode, message: str | None) -> Any:
    return make(response_class(API_KEY, ctx.api_version), error_code=code, error_message=message, responses=(),
                node_endpoints=(), acquisition_lock_timeout=timedelta(0))
