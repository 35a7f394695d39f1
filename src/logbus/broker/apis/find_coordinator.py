"""FindCoordinator (key 10): serves v0–v6.

Key type 0 (group) is answered with the leader of the group's `__consumer_offsets`
partition, key type 1 (transaction) with the leader of the transactional id's
`__transaction_state` partition, key type 2 (share; KIP-932, "group:topicId:partition", from
brokers: ClusterAction, else CLUSTER_AUTHORIZATION_FAILED; INVALID_REQUEST for a malformed key)
with the leader of the share-partition's `__share_group_state` partition; the topic is created
on first use, as Kafka does
(COORDINATOR_NOT_AVAILABLE while it cannot be, e.g. on a full disk, or while the leader has no
endpoint on the listener the request came in on). v4+ batches several keys
(`coordinator_keys`) and answers each in a `Coordinator` entry. Other key types: INVALID_REQUEST.
With an authorizer a key needs Describe on its group (GROUP_AUTHORIZATION_FAILED) or
transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator import group_coordinator
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import require, require_cluster
from ..context import RequestContext

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    cls = response_class(API_KEY, ctx.api_version)
    key_type = getattr(request, "key_type", GROUP_KEY_TYPE)
    if ctx.api_version >= 4:
        module = response_module(API_KEY, ctx.api_version)
        answers = [await _find(ctx, key, key_type) for key in request.coordinator_keys]
        return make(cls, coordinators=tuple(make(module.Coordinator, key=key, **answer)
                                            for key, answer in zip(request.coordinator_keys, answers, strict=True)))
    return make(cls, **await _find(ctx, request.key, key_type))


async def _find(ctx: RequestContext, key: str, key_type: int) -> dict[str, Any]:
    try:
        coordinator = _coordinator(ctx, key, key_type)
        await coordinator.store.create()
    except KafkaApiError as exc:  # a refusal, or e.g. a full disk: the client retries later
        return _error(exc.code, str(exc))
    leader = coordinator.store.leader_of(coordinator.partition_for(key))
    node = next((b for b in ctx.broker.metadata.brokers() if b.broker_id == leader), None)
    endpoint = None if node is None else node.endpoint(ctx.listener_name)
    if endpoint is None:  # not live, or not on the client's listener
        return _error(ErrorCode.coordinator_not_available, "The coordinator is not available")
    return {"error_code": ErrorCode.none, "error_message": None, "node_id": leader,
            "host": endpoint.host, "port": endpoint.port}


def _coordinator(ctx: RequestContext, key: str, key_type: int) -> Any:
    """The coordinator of `key`'s type, once the principal may Describe the key (ClusterAction
    for a share key, which only brokers ask for)."""
    if key_type == GROUP_KEY_TYPE:
        require(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key)
        return group_coordinator(ctx.broker)
    if key_type == TRANSACTION_KEY_TYPE:
        require(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key)
        return ctx.broker.txn_coordinator
    if key_type == SHARE_KEY_TYPE:
        require_cluster(ctx, AclOperation.CLUSTER_ACTION)
        if not _is_share_key(key):
            raise KafkaApiError(ErrorCode.invalid_request, f"Invalid share coordinator key {key}")
        return ctx.broker.share_coordinator
    raise KafkaApiError(ErrorCode.invalid_request, f"Unknown coordinator key type {key_type}")


def _is_share_key(key: str) -> bool:
    """"group:topicId:partition" (the group id may hold colons; Kafka's SharePartitionKey)."""
    parts = key.rsplit(":", 2)
    return len(parts) == 3 and bool(parts[0]) and len(parts[1]) == 22 and parts[2].isdigit()


def _error(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "node_id": -1, "host": "", "port": -1}
