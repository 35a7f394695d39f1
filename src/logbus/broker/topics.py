"""Topic rules shared by the APIs: legal names, auto-creation, internal topics, partition limits.

Internal topics (`__consumer_offsets`, `__transaction_state`) belong to the broker: clients cannot
delete them or change their partition count (their partition count decides which partition
holds a group's offsets), as Kafka's tools refuse it ("is a kafka internal topic and is not
allowed to be marked for deletion"); the answer is INVALID_REQUEST.

Partitions are bounded so that no request can make the broker create more than it can serve:
one request may add at most MAX_PARTITIONS_PER_REQUEST (Kafka's controller: 10,000, answered
with POLICY_VIOLATION "Excessively large number of partitions per request."), and the broker
hosts at most `max.partitions` (a logbus key) in all topics together.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ..cluster.metadata import TopicMetadata
from ..errors import KafkaApiError, TopicExistsError

if TYPE_CHECKING:
    from .broker import Broker

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
MAX_PARTITIONS_PER_REQUEST = 10_000  # Kafka's ReplicationControlManager.MAX_PARTITIONS_PER_BATCH


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise KafkaApiError(ErrorCode.invalid_topic_exception, f"Topic name {name!r} is illegal")
    if len(name) > MAX_NAME_LENGTH:
        raise KafkaApiError(
            ErrorCode.invalid_topic_exception,
            f"Topic name is longer than {MAX_NAME_LENGTH} characters",
        )
    if not _LEGAL.match(name):
        raise KafkaApiError(
            ErrorCode.invalid_topic_exception,
            f"Topic name {name!r} is illegal: only ASCII letters, digits, '.', '_' and '-'",
        )


def refuse_internal(topic: TopicMetadata, change: str) -> None:
    """Raise INVALID_REQUEST when `topic` is internal: clients may not `change` it."""
    if topic.internal or topic.name in INTERNAL_TOPICS:
        raise KafkaApiError(
            ErrorCode.invalid_request, f"Topic {topic.name} is a Kafka internal topic: it does not allow {change}"
        )


def check_request_partitions(count: int) -> None:
    """Refuse a request that would add more than MAX_PARTITIONS_PER_REQUEST partitions, as Kafka does."""
    if count > MAX_PARTITIONS_PER_REQUEST:
        raise KafkaApiError(ErrorCode.policy_violation, "Excessively large number of partitions per request.")


def check_partition_budget(broker: Broker, added: int) -> None:
    """Refuse `added` new partitions when the broker would then host more than `max.partitions`."""
    limit = broker.config["max.partitions"]
    hosted = sum(len(topic.partitions) for topic in broker.metadata.topics().values())
    if hosted + added > limit:
        raise KafkaApiError(
            ErrorCode.policy_violation,
            f"Adding {added} partitions to the {hosted} this broker hosts would exceed max.partitions={limit}",
        )


def check_replication_factor(broker: Broker, replication: int) -> None:
    available = len(broker.metadata.brokers())
    if replication > available:
        raise KafkaApiError(
            ErrorCode.invalid_replication_factor,
            f"Replication factor: {replication} larger than available brokers: {available}.",
        )


async def ensure_topic(broker: Broker, name: str, allow_create: bool = True) -> TopicMetadata:
    """The topic's metadata, creating it with broker defaults when auto-creation allows.

    A creation the broker refuses (replication factor above the live brokers, `max.partitions`)
    raises the error CreateTopics would answer, as Kafka's auto-creation answers it per topic.
    """
    existing = broker.metadata.topic(name)
    if existing is not None:
        return existing
    validate_topic_name(name)
    if not (allow_create and broker.config["auto.create.topics.enable"]):
        raise KafkaApiError(ErrorCode.unknown_topic_or_partition, f"Unknown topic {name}")
    partitions, replication = broker.config["num.partitions"], broker.config["default.replication.factor"]
    check_replication_factor(broker, replication)
    check_partition_budget(broker, partitions)
    try:
        created = await broker.metadata.create_topic(name, partitions, replication, {})
    except TopicExistsError:  # created meanwhile
        return broker.metadata.topic(name)
    await broker.replicas.wait_opened(name)
    return created
