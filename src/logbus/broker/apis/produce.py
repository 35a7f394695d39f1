"""Produce (key 0): advertises v0–v13 as Kafka 4.x does, serves v3–v13.

Kafka advertises v0 so that librdkafka keeps gzip/snappy/lz4 enabled (KAFKA-18659); v0–v2
requests are refused by closing the connection. v13 names topics by id.
Per partition, per batch only: size check (MESSAGE_TOO_LARGE), framing, magic and CRC32C
(CORRUPT_MESSAGE), idempotent sequence checks, then one write of the whole blob with base
offsets and leader epoch patched in place. acks=0 gets no response; acks=1 and -1 are
answered once the batches are in the log (and fsynced when the flush policy says so).
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from ...cluster.partition import NotEnoughReplicasError, NotLeaderError, Partition
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...protocol.records import BatchHeader, CorruptRecordError, iter_records, validate_batches
from ...storage.log import InvalidProducerEpochError, OutOfOrderSequenceError
from ..context import RequestContext
from ..topics import validate_topic_name

API_KEY = 0
MIN_VERSION = 0
MIN_SERVED = 3
MAX_VERSION = 13


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    topics = []
    for topic_data in request.topic_data:
        topic = _resolve(ctx, topic_data)
        responses = []
        for data in topic_data.partition_data:
            responses.append(await _produce_partition(ctx, module, topic, data, request.acks))
        topics.append(
            make(module.TopicProduceResponse, name=getattr(topic_data, "name", None),
                 topic_id=getattr(topic_data, "topic_id", None), partition_responses=tuple(responses))
        )
    if request.acks == 0:
        return None
    return make(response_class(API_KEY, ctx.api_version), responses=tuple(topics), node_endpoints=())


def _resolve(ctx: RequestContext, topic_data: Any) -> str | None:
    name = getattr(topic_data, "name", None)
    if name is not None:
        return name
    metadata = ctx.broker.metadata.topic_by_id(str(topic_data.topic_id))
    return metadata.name if metadata else None


async def _produce_partition(
    ctx: RequestContext, module: Any, topic: str | None, data: Any, acks: int
) -> Any:
    broker = ctx.broker
    partition = broker.replicas.get(topic, data.index) if topic is not None else None
    try:
        if partition is None:
            raise _missing_partition_error(topic)
        info = _append(partition, data.records, acks)
        await broker.replicas.flush_if_due(partition)
    except KafkaApiError as exc:
        return _partition_response(module, data.index, exc.code, -1, -1, -1, exc.message)
    return _partition_response(
        module, data.index, ErrorCode.none, info.base_offset, info.log_append_time,
        partition.log.log_start_offset, None,
    )


def _missing_partition_error(topic: str | None) -> KafkaApiError:
    """Why a partition is not here: an illegal topic name (which no topic can have) says so,
    like Metadata and CreateTopics do, so a client stops instead of retrying."""
    if topic is None:
        return KafkaApiError(ErrorCode.unknown_topic_id)
    try:
        validate_topic_name(topic)
    except KafkaApiError as exc:
        return exc
    return KafkaApiError(ErrorCode.unknown_topic_or_partition)


def _append(partition: Partition, records: bytes | None, acks: int) -> Any:
    if acks not in (-1, 0, 1):
        raise KafkaApiError(ErrorCode.invalid_required_acks, f"acks={acks} is not -1, 0 or 1")
    if not records:
        raise KafkaApiError(ErrorCode.corrupt_message, "no records")
    try:
        headers = validate_batches(records)
    except CorruptRecordError as exc:
        raise KafkaApiError(ErrorCode.corrupt_message, str(exc)) from None
    limit = partition.log.config.max_message_bytes
    for header in headers:
        if header.size > limit:
            raise KafkaApiError(
                ErrorCode.message_too_large,
                f"batch of {header.size} bytes exceeds max.message.bytes={limit}",
            )
    if partition.log.config.compact:
        _require_keys(records, headers)
    try:
        return partition.append_as_leader(bytearray(records), headers, acks)
    except NotLeaderError as exc:
        raise KafkaApiError(ErrorCode.not_leader_or_follower, str(exc)) from None
    except NotEnoughReplicasError as exc:
        raise KafkaApiError(ErrorCode.not_enough_replicas, str(exc)) from None
    except OutOfOrderSequenceError as exc:
        raise KafkaApiError(ErrorCode.out_of_order_sequence_number, str(exc)) from None
    except InvalidProducerEpochError as exc:
        raise KafkaApiError(ErrorCode.invalid_producer_epoch, str(exc)) from None
    except OSError as exc:
        raise KafkaApiError(ErrorCode.kafka_storage_error, f"disk error: {exc.strerror}") from None


def _require_keys(records: bytes, headers: list[BatchHeader]) -> None:
    """A compacted topic takes only keyed records (Kafka: INVALID_RECORD)."""
    for header in headers:
        if not header.is_control and any(record.key is None for record in iter_records(records, header)):
            raise KafkaApiError(ErrorCode.invalid_record, "Compacted topic cannot accept message without key.")


def _partition_response(
    module: Any, index: int, error: ErrorCode, base_offset: int, append_time: int,
    log_start: int, message: str | None,
) -> Any:
    return make(
        module.PartitionProduceResponse, index=index, error_code=error, base_offset=base_offset,
        log_append_time=None if append_time < 0 else _datetime(append_time),
        log_start_offset=log_start, record_errors=(), error_message=message,
    )


def _datetime(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
