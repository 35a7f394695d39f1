"""Topic rules shared by the APIs: legal names, auto-creation, internal topics."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ..cluster.metadata import MetadataWriteError, TopicExistsError, TopicMetadata, UnknownTopicError
from ..errors import KafkaApiError

if TYPE_CHECKING:
    from .broker import Broker

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


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


async def ensure_topic(broker: Broker, name: str, allow_create: bool = True) -> TopicMetadata:
    """The topic's metadata, creating it with broker defaults when auto-creation allows."""
    existing = broker.metadata.topic(name)
    if existing is not None:
        return existing
    validate_topic_name(name)
    if not (allow_create and broker.config["auto.create.topics.enable"]):
        raise KafkaApiError(ErrorCode.unknown_topic_or_partition, f"Unknown topic {name}")
    try:
        with metadata_change(name):
            return await broker.metadata.create_topic(
                name, broker.config["num.partitions"], broker.config["default.replication.factor"], {}
            )
    except KafkaApiError as exc:
        if exc.code != ErrorCode.topic_already_exists:
            raise
        return broker.metadata.topic(name)


@contextlib.contextmanager
def metadata_change(name: str) -> Iterator[None]:
    """Map the metadata store's refusals of a change to `name` to the Kafka error codes."""
    try:
        yield
    except TopicExistsError:
        raise KafkaApiError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.") from None
    except UnknownTopicError:
        raise KafkaApiError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist") from None
    except MetadataWriteError as exc:
        raise KafkaApiError(ErrorCode.kafka_storage_error, str(exc)) from None
