"""Admin helpers the CLI tools and the console share, on the blocking client: the log dirs of
brokers as kafka-log-dirs.sh reports them (DescribeLogDirs, which confluent-kafka's AdminClient
lacks), `KEY=VALUE` config entries as kafka-topics.sh and kafka-configs.sh read them, a
coordinator's requests retried while it loads or moves, and share groups (KIP-932: listing,
describing, their start offsets, resetting and deleting them, which confluent-kafka lacks too).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from ..protocol.codec import make
from .apis import (
    ALTER_SHARE_GROUP_OFFSETS,
    DELETE_GROUPS,
    DELETE_SHARE_GROUP_OFFSETS,
    DESCRIBE_SHARE_GROUP_OFFSETS,
    FIND_COORDINATOR,
    LIST_GROUPS,
    SHARE_GROUP_DESCRIBE,
    api_module,
)
from .client import Client
from .errors import RefusedError

T = TypeVar("T")

GROUP_KEY = 0  # FindCoordinator's key type for group ids
# Kafka's admin client retries these until its timeout: the coordinator is loading or moving.
RETRIABLE = frozenset({ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
                       ErrorCode.not_coordinator})
RETRY_BACKOFF_S = 0.1  # Kafka's retry.backoff.ms

DESCRIBE_LOG_DIRS = 35
DESCRIBE_LOG_DIRS_VERSION = 2
# Kafka's tool prints the exception a log dir's error code maps to; these are the ones a broker sends.
ERROR_NAMES = {
    ErrorCode.kafka_storage_error: "org.apache.kafka.common.errors.KafkaStorageException",
    ErrorCode.cluster_authorization_failed: "org.apache.kafka.common.errors.ClusterAuthorizationException",
}


def describe_log_dirs(client: Client, broker_ids: Iterable[int] | None = None,
                      topics: Collection[str] = ()) -> dict[str, Any]:
    """kafka-log-dirs.sh's JSON document (`{"brokers": [...], "version": 1}`) for `broker_ids`
    (default: every broker of the cluster), with the partitions of `topics` (default: all)."""
    if broker_ids is None:
        client.partitions(())
        broker_ids = sorted(client.brokers)
    module = load_payload_module(DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION, EntityType.request)
    request = make(module.DescribeLogDirsRequest, topics=None)
    brokers = []
    for broker_id in broker_ids:
        response = client.call_broker(broker_id, DESCRIBE_LOG_DIRS, request, DESCRIBE_LOG_DIRS_VERSION)
        brokers.append({"broker": broker_id, "logDirs": [_log_dir(result, topics) for result in response.results]})
    return {"brokers": brokers, "version": 1}


def _log_dir(result: Any, topics: Collection[str]) -> dict[str, Any]:
    error = None if result.error_code == ErrorCode.none else ERROR_NAMES.get(result.error_code, result.error_code.name)
    partitions = [
        {"partition": f"{topic.name}-{p.partition_index}", "size": p.partition_size, "offsetLag": p.offset_lag,
         "isFuture": p.is_future_key}
        for topic in result.topics if not topics or topic.name in topics
        for p in topic.partitions
    ]
    return {"logDir": result.log_dir, "error": error, "partitions": partitions}


def parse_key_values(items: list[str], option: str) -> dict[str, str]:
    """`["k=v", ...]` -> `{"k": "v"}`; ValueError naming `option` for an item without `=`."""
    values: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{option} expects KEY=VALUE, got {item!r}")
        values[key.strip()] = value.strip()
    return values


# ---------------------------------------------------------------- coordinators


def retrying(attempt: Callable[[], T], timeout: float, error_of: Callable[[T], ErrorCode] = lambda a: a.error_code
             ) -> T:
    """`attempt()` again while its answer says the coordinator is loading or moving, as Kafka's
    admin client does, for at most `timeout` seconds; the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        answer = attempt()
        if error_of(answer) not in RETRIABLE or time.monotonic() >= deadline:
            return answer
        time.sleep(RETRY_BACKOFF_S)


def find_coordinator(client: Client, key: str, key_type: int) -> int:
    """The id of the broker that coordinates `key` (a group id: GROUP_KEY; a transactional id: 1)."""
    module = api_module(FIND_COORDINATOR)
    request = make(module.request_cls, key=key, key_type=key_type)
    answer = retrying(lambda: client.call_any(FIND_COORDINATOR, request), client.timeout)
    if answer.error_code != ErrorCode.none:
        raise refused(answer.error_code, "FindCoordinator")
    return answer.node_id


def refused(code: ErrorCode, subject: str | None = None, message: str | None = None) -> RefusedError:
    """The error of an error code in an answer: `subject: CODE_NAME (message)`."""
    text = code.name.upper() if not message else f"{code.name.upper()} ({message})"
    return RefusedError(code, text if subject is None else f"{subject}: {text}")


def _at_coordinator(client: Client, group_id: str, api_key: int, request: Any,
                    error_of: Callable[[Any], ErrorCode]) -> Any:
    """`request` at the group's coordinator, found again while it moves or loads."""
    return retrying(lambda: client.call_broker(find_coordinator(client, group_id, GROUP_KEY), api_key, request),
                    client.timeout, error_of)


# ---------------------------------------------------------------- share groups (KIP-932)


@dataclass(frozen=True, slots=True)
class SharePartitionOffset:
    """One share-partition as DescribeShareGroupOffsets answers it (None: the group has no state of it)."""

    topic: str
    partition: int
    start_offset: int | None
    leader_epoch: int | None
    lag: int | None


def list_share_groups(client: Client, states: Collection[str] = ()) -> list[tuple[str, str]]:
    """(group id, state) of every share group of the cluster (in `states`, when given), by id:
    ListGroups with the type filter at every broker, as Kafka's admin client lists groups."""
    module = api_module(LIST_GROUPS)
    request = make(module.request_cls, states_filter=tuple(states), types_filter=("share",))
    client.partitions(())
    listed = []
    for broker in sorted(client.brokers):
        answer = retrying(lambda broker=broker: client.call_broker(broker, LIST_GROUPS, request), client.timeout)
        if answer.error_code != ErrorCode.none:
            raise refused(answer.error_code, f"ListGroups at broker {broker}")
        listed += [(group.group_id, group.group_state) for group in answer.groups]
    return sorted(listed)


def describe_share_group(client: Client, group_id: str) -> tuple[int, Any]:
    """(coordinator id, ShareGroupDescribe's DescribedGroup); KafkaError for an error code
    (GROUP_ID_NOT_FOUND: no such share group)."""
    module = api_module(SHARE_GROUP_DESCRIBE)
    request = make(module.request_cls, group_ids=(group_id,), include_authorized_operations=False)
    coordinator = find_coordinator(client, group_id, GROUP_KEY)
    answer = retrying(lambda: client.call_broker(coordinator, SHARE_GROUP_DESCRIBE, request), client.timeout,
                      lambda reply: reply.groups[0].error_code)
    described = answer.groups[0]
    if described.error_code != ErrorCode.none:
        raise refused(described.error_code, f"share group '{group_id}'", described.error_message)
    return coordinator, described


def share_group_offsets(client: Client, group_id: str, topics: Mapping[str, Collection[int]] | None = None
                        ) -> list[SharePartitionOffset]:
    """The group's share-partitions (of `topics`, else every one it has state of), by topic and partition."""
    module = api_module(DESCRIBE_SHARE_GROUP_OFFSETS)
    wanted = None if topics is None else tuple(
        make(module.request.DescribeShareGroupOffsetsRequestTopic, topic_name=name, partitions=tuple(indexes))
        for name, indexes in topics.items())
    request = make(module.request_cls, groups=(make(module.request.DescribeShareGroupOffsetsRequestGroup,
                                                    group_id=group_id, topics=wanted),))
    answer = _at_coordinator(client, group_id, DESCRIBE_SHARE_GROUP_OFFSETS, request,
                             lambda reply: reply.groups[0].error_code)
    described = answer.groups[0]
    if described.error_code != ErrorCode.none:
        raise refused(described.error_code, f"share group '{group_id}'", described.error_message)
    found = []
    for topic in described.topics:
        for p in topic.partitions:
            if p.error_code != ErrorCode.none:
                raise refused(p.error_code, f"{topic.topic_name}-{p.partition_index}", p.error_message)
            known = p.start_offset >= 0
            found.append(SharePartitionOffset(topic.topic_name, p.partition_index, p.start_offset if known else None,
                                              p.leader_epoch if known else None,
                                              p.lag if known and p.lag >= 0 else None))
    return sorted(found, key=lambda row: (row.topic, row.partition))


def alter_share_group_offsets(client: Client, group_id: str, offsets: Mapping[tuple[str, int], int]
                              ) -> dict[tuple[str, int], ErrorCode]:
    """Set the start offsets of an empty share group: each partition's outcome; KafkaError for the
    request's (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP ...)."""
    module = api_module(ALTER_SHARE_GROUP_OFFSETS)
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), offset in offsets.items():
        by_topic.setdefault(topic, []).append(make(module.request.AlterShareGroupOffsetsRequestPartition,
                                                   partition_index=index, start_offset=offset))
    request = make(module.request_cls, group_id=group_id, topics=tuple(
        make(module.request.AlterShareGroupOffsetsRequestTopic, topic_name=name, partitions=tuple(partitions))
        for name, partitions in by_topic.items()))
    answer = _at_coordinator(client, group_id, ALTER_SHARE_GROUP_OFFSETS, request, lambda reply: reply.error_code)
    if answer.error_code != ErrorCode.none:
        raise refused(answer.error_code, f"share group '{group_id}'", answer.error_message)
    return {(topic.topic_name, p.partition_index): p.error_code for topic in answer.responses
            for p in topic.partitions}


def delete_share_group_offsets(client: Client, group_id: str, topics: Collection[str]) -> dict[str, ErrorCode]:
    """Remove an empty share group's state of `topics`: each topic's outcome; KafkaError for the request's."""
    module = api_module(DELETE_SHARE_GROUP_OFFSETS)
    request = make(module.request_cls, group_id=group_id, topics=tuple(
        make(module.request.DeleteShareGroupOffsetsRequestTopic, topic_name=name) for name in topics))
    answer = _at_coordinator(client, group_id, DELETE_SHARE_GROUP_OFFSETS, request, lambda reply: reply.error_code)
    if answer.error_code != ErrorCode.none:
        raise refused(answer.error_code, f"share group '{group_id}'", answer.error_message)
    return {topic.topic_name: topic.error_code for topic in answer.responses}


def delete_group(client: Client, group_id: str) -> ErrorCode:
    """DeleteGroups of one group at its coordinator: its outcome."""
    module = api_module(DELETE_GROUPS)
    request = make(module.request_cls, groups_names=(group_id,))
    answer = _at_coordinator(client, group_id, DELETE_GROUPS, request, lambda reply: reply.results[0].error_code)
    return answer.results[0].error_code
