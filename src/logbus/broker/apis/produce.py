"""Produce (key 0): advertises v0–v13 as Kafka 4.x does, serves v3–v13.

Kafka advertises v0 so that librdkafka keeps gzip/snappy/lz4 enabled (KAFKA-18659); v0–v2
requests are refused by closing the connection. v13 names topics by id.

Per partition, as Kafka's ProduceRequest.validateRecords and LogValidator do: no internal topic
(INVALID_TOPIC_EXCEPTION), exactly one magic-2 batch (INVALID_RECORD), zstd only from v7
(UNSUPPORTED_COMPRESSION_TYPE), framing and CRC32C (CORRUPT_MESSAGE), max.message.bytes
(MESSAGE_TOO_LARGE), a record count matching the offset range, no control batch and consistent
producer fields (INVALID_RECORD), a transactional batch only with a transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka answers) and, when it opens its transaction in
this partition, only once the coordinator confirms the partition was added (KIP-890:
INVALID_TXN_STATE), then the records (see `_check_records`), idempotent sequence checks, and one
write of the blob with base offsets and leader epoch patched in place. A rejected record is named
in `record_errors` (batch index and message), as Kafka does. acks=0 gets no response; acks=1 and
-1 are answered once the batches are in the log (and fsynced when the flush policy says so).

With an authorizer, as Kafka's KafkaApis: a transactional request needs Write on its
transactional id (else every partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED), each topic
needs Write (TOPIC_AUTHORIZATION_FAILED); both are decided before anything else about the topic.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kio.schema.errors import ErrorCode

from ...cluster.appends import AppendResult, Batches
from ...cluster.partition import Partition
from ...config import LogConfig
from ...errors import KafkaApiError, TransactionalIdAuthorizationError
from ...protocol.codec import make, response_class, response_module
from ...protocol.records import (
    CODECS,
    COMPRESSION_NONE,
    COMPRESSION_ZSTD,
    HEADER_SIZE,
    BatchHeader,
    RecordError,
    RecordRules,
    check_client_batch,
    check_record_lengths,
    check_records,
    decompress_bounded,
    recompress_batch,
    validate_batches,
)
from ...security.acl import AclOperation, ResourceType
from ...storage.log import AppendInfo, now_ms
from ..authorization import denial
from ..context import DeferredResponse, RequestContext
from ..topics import INTERNAL_TOPICS, validate_topic_name

API_KEY = 0
MIN_VERSION = 0
MIN_SERVED = 3
MAX_VERSION = 13
ZSTD_MIN_VERSION = 7
DECOMPRESSED_MIN_LIMIT = 64 << 20  # bytes a compressed batch may decode to, at least
DECOMPRESSED_LIMIT_FACTOR = 4  # ... or this many times max.message.bytes
OFF_LOOP_RECORDS = 4096  # a batch opened record by record with this many records is checked in a thread
# One thread: heavy checks are GIL-bound anyway, and one decompression buffer at a time off the
# loop (plus one on it) bounds what decompression bombs sent at once can hold.
_CHECKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="logbus-produce-check")


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    topics = []
    for topic_data in request.topic_data:
        topic = _resolve(ctx, topic_data)
        refusal = None if ctx.broker.authorizer is None else _refusal(ctx, topic, request.transactional_id)
        responses = []
        for data in topic_data.partition_data:
            if refusal is not None:
                responses.append(_partition_response(module, data.index, refusal.code, -1, -1, -1, None))
            else:
                responses.append(await _produce_partition(ctx, module, topic, data, request))
        topics.append((topic_data, responses))
    if request.acks == 0:
        if any(_failed(r) for _, responses in topics for r in responses):
            ctx.close_connection()  # Kafka closes it, so that the producer refreshes its metadata
        return None
    if any(isinstance(r, _AwaitingReplicas) for _, responses in topics for r in responses):
        return DeferredResponse(_answer_once_replicated(ctx, module, topics, request.timeout.total_seconds()))
    return _response(ctx, module, topics)


async def _answer_once_replicated(ctx: RequestContext, module: Any, topics: list[tuple[Any, list[Any]]],
                                  timeout: float) -> Any:
    await _wait_for_replicas(ctx, topics, timeout)
    return _response(ctx, module, topics)


def _response(ctx: RequestContext, module: Any, topics: list[tuple[Any, list[Any]]]) -> Any:
    return make(response_class(API_KEY, ctx.api_version), responses=tuple(
        make(module.TopicProduceResponse, name=getattr(topic_data, "name", None),
             topic_id=getattr(topic_data, "topic_id", None), partition_responses=tuple(responses))
        for topic_data, responses in topics
    ), node_endpoints=())


@dataclasses.dataclass(frozen=True, slots=True)
class _AwaitingReplicas:
    """An appended partition whose acks=all answer waits for the ISR (Kafka's DelayedProduce)."""

    appended: AppendResult
    response: Any


def _failed(response: Any) -> bool:
    return not isinstance(response, _AwaitingReplicas) and response.error_code != ErrorCode.none


async def _wait_for_replicas(ctx: RequestContext, topics: list[tuple[Any, list[Any]]], timeout: float) -> None:
    """Replace every waiting partition's answer once the ISR has its records, or with the refusal
    that ends the wait (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER)."""
    waiting = [(responses, i, r) for _, responses in topics for i, r in enumerate(responses)
               if isinstance(r, _AwaitingReplicas)]
    answers = await asyncio.gather(*(_replicated_response(ctx, r, timeout) for _, _, r in waiting))
    for (responses, i, _), answer in zip(waiting, answers, strict=True):
        responses[i] = answer


async def _replicated_response(ctx: RequestContext, waited: _AwaitingReplicas, timeout: float) -> Any:
    try:
        await ctx.broker.replicas.wait_for_replicas(waited.appended, timeout)
    except KafkaApiError as exc:
        return dataclasses.replace(waited.response, error_code=exc.code, base_offset=-1)
    return waited.response


def _refusal(ctx: RequestContext, topic: str | None, transactional_id: str | None) -> KafkaApiError | None:
    """The authorization refusal for a topic's partitions, if any (an authorizer is on)."""
    if transactional_id is not None:
        refused = denial(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)
        if refused is not None:
            return refused
    return None if topic is None else denial(ctx, AclOperation.WRITE, ResourceType.TOPIC, topic)


def _resolve(ctx: RequestContext, topic_data: Any) -> str | None:
    name = getattr(topic_data, "name", None)
    if name is not None:
        return name
    metadata = ctx.broker.metadata.topic_by_id(str(topic_data.topic_id))
    return metadata.name if metadata else None


async def _produce_partition(ctx: RequestContext, module: Any, topic: str | None, data: Any, request: Any) -> Any:
    broker = ctx.broker
    partition = broker.replicas.get(topic, data.index) if topic is not None else None
    try:
        if topic in INTERNAL_TOPICS:
            raise KafkaApiError(ErrorCode.invalid_topic_exception, f"Cannot append to internal topic {topic}")
        if partition is None:
            if topic is not None and broker.replicas.is_offline(topic, data.index):
                raise KafkaApiError(ErrorCode.kafka_storage_error, f"the log dir of {topic}-{data.index} failed")
            raise _missing_partition_error(topic)
        records, header = _validate(partition.log.config, data.records, request, ctx.api_version)
        if header.is_transactional:
            await _verify_in_transaction(ctx, partition, request.transactional_id, header)
        record_errors = await _check_records_off_loop_if_heavy(ctx, partition, records, header)
        if record_errors:
            return _rejected_records(module, data.index, record_errors)
        batches = _apply_compression_type(partition.log.config, records, [header])
        appended = await broker.replicas.append_records(
            partition.topic, partition.index, batches, request.acks,
            on_appended=lambda info: _count_produced(ctx, partition.topic, header, info),
        )
    except KafkaApiError as exc:
        return _partition_response(module, data.index, exc.code, -1, -1, -1, exc.message)
    info = appended.info
    response = _partition_response(
        module, data.index, ErrorCode.none, info.base_offset, info.log_append_time,
        appended.partition.log.log_start_offset, None,
    )
    if appended.awaiting_replicas:
        return _AwaitingReplicas(appended, response)
    return response


def _count_produced(ctx: RequestContext, topic: str, header: BatchHeader, info: AppendInfo) -> None:
    """BytesIn and MessagesIn as Kafka counts them: a batch appended (not a retried duplicate)."""
    if ctx.broker.metrics is not None and not info.duplicate:
        ctx.broker.metrics.traffic.produced(topic, header.record_count, header.size)


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


def _validate(config: LogConfig, records: bytes | None, request: Any, version: int) -> tuple[bytes, BatchHeader]:
    """The request-level and batch-level rules; returns the one batch and its header."""
    if request.acks not in (-1, 0, 1):
        raise KafkaApiError(ErrorCode.invalid_required_acks, f"acks={request.acks} is not -1, 0 or 1")
    if not records:
        raise KafkaApiError(ErrorCode.invalid_record, "a produce request must carry one record batch per partition")
    headers = validate_batches(records)  # CorruptRecordError (CORRUPT_MESSAGE)
    if len(headers) != 1:
        raise KafkaApiError(
            ErrorCode.invalid_record,
            f"produce requests must carry exactly one record batch per partition, not {len(headers)}",
        )
    header = headers[0]
    if header.compression == COMPRESSION_ZSTD and version < ZSTD_MIN_VERSION:
        raise KafkaApiError(ErrorCode.unsupported_compression_type, f"Produce v{version} may not use zstd")
    if header.size > config.max_message_bytes:
        raise KafkaApiError(
            ErrorCode.message_too_large,
            f"batch of {header.size} bytes exceeds max.message.bytes={config.max_message_bytes}",
        )
    check_client_batch(header)
    if header.is_transactional and request.transactional_id is None:
        raise TransactionalIdAuthorizationError("transactional batch without a transactional id")
    return records, header


async def _verify_in_transaction(ctx: RequestContext, partition: Partition, transactional_id: str,
                                 header: BatchHeader) -> None:
    """KIP-890's verification: the first batch of a transaction in this partition is appended
    only once its coordinator confirms the partition is in the producer's open transaction (a
    late batch of a finished transaction must not open a new one, hanging the LSO). A refusal is
    INVALID_TXN_STATE; a coordinator that cannot answer now gives NOT_ENOUGH_REPLICAS, which
    producers retry, as Kafka answers."""
    if not partition.log.producer_state.in_transaction(header.producer_id, header.producer_epoch):
        await ctx.broker.txn_verifier.verify(transactional_id, header.producer_id, header.producer_epoch,
                                             partition.topic, partition.index)


def _record_rules(config: LogConfig) -> RecordRules:
    now = now_ms()
    return RecordRules(
        check_timestamps=not config.log_append_time,
        min_timestamp=now - config.message_timestamp_before_max_ms,
        max_timestamp=now + config.message_timestamp_after_max_ms,
        require_keys=config.compact,
    )


async def _check_records_off_loop_if_heavy(
    ctx: RequestContext, partition: Partition, records: bytes, header: BatchHeader
) -> list[RecordError]:
    """`_check_records`, in a thread when it will open a batch of many records, so other
    connections are served meanwhile (the GIL is handed back every switch interval; cramjam
    decompresses without it). The partition must still be the one hosted when it is done."""
    config = partition.log.config
    opened = header.compression != COMPRESSION_NONE or config.compact
    if not opened or header.record_count < OFF_LOOP_RECORDS:
        return _check_records(config, records, header)
    errors = await asyncio.get_running_loop().run_in_executor(_CHECKER, _check_records, config, records, header)
    if ctx.broker.replicas.get(partition.topic, partition.index) is not partition:
        raise KafkaApiError(ErrorCode.not_leader_or_follower, f"{partition} changed while its batch was checked")
    return errors


def _check_records(config: LogConfig, records: bytes, header: BatchHeader) -> list[RecordError]:
    """Check the batch's records; returns the rejected ones (Kafka's RecordErrors).

    Kafka walks every record. Here every record is walked (`check_records`: framing, offset
    deltas, keys, timestamps) only when the topic is compacted, or when the header's timestamps
    break the topic's range (to name the records). Otherwise a compressed batch is decompressed
    into a bounded buffer and its record lengths walked (an undecodable or overlong body is
    CORRUPT_MESSAGE), and an uncompressed one is trusted past its CRC and header: its offsets come
    from the validated header, so storage never depends on its records, and a Python walk of
    every record would cost the produce path several times its per-record CPU (docs/architecture.md).
    """
    rules = _record_rules(config)
    timestamps_in_range = not rules.check_timestamps or (
        rules.min_timestamp <= header.base_timestamp and header.max_timestamp <= rules.max_timestamp
    )
    if header.compression == COMPRESSION_NONE and timestamps_in_range and not rules.require_keys:
        return []
    body = _body(config, records, header)
    if timestamps_in_range and not rules.require_keys:
        check_record_lengths(body, header.record_count)
        return []
    return check_records(body, header, rules)[1]


def _body(config: LogConfig, records: bytes, header: BatchHeader) -> bytes | bytearray | memoryview:
    """The batch's records section, decompressed into at most a bounded number of bytes."""
    limit = max(DECOMPRESSED_MIN_LIMIT, DECOMPRESSED_LIMIT_FACTOR * config.max_message_bytes)
    return decompress_bounded(header.compression, memoryview(records)[HEADER_SIZE : header.size], limit)


def _rejected_records(module: Any, index: int, errors: list[RecordError]) -> Any:
    """A batch refused for some of its records: every one named, the first three in the message."""
    code = ErrorCode.invalid_timestamp if any(
        e.code == ErrorCode.invalid_timestamp for e in errors
    ) else ErrorCode.invalid_record
    shown = ", ".join(f"RecordError(batchIndex={e.batch_index}, message='{e.message}')" for e in errors[:3])
    message = (
        f"One or more records have been rejected due to {len(errors)} record errors in total, "
        f"and only showing the first three errors at most: [{shown}]"
    )
    record_errors = tuple(
        make(module.BatchIndexAndErrorMessage, batch_index=e.batch_index, batch_index_error_message=e.message)
        for e in errors
    ) if hasattr(module, "BatchIndexAndErrorMessage") else ()
    return _partition_response(module, index, code, -1, -1, -1, message, record_errors)


def _apply_compression_type(config: LogConfig, records: bytes, headers: list[BatchHeader]) -> Batches:
    """compression.type as Kafka means it: `producer` keeps the batch as sent; a codec the
    batch does not have already recompresses it (cramjam) at the topic's level for that codec.
    A batch already in the topic's codec is kept as sent, whatever its level, as in Kafka."""
    target = CODECS.get(config.compression_type)
    header = headers[0]
    if target is None or target == header.compression:
        return Batches(bytearray(records), headers)
    rebuilt = recompress_batch(header, _body(config, records, header), target, config.compression_level)
    if len(rebuilt) > config.max_message_bytes:  # Kafka checks the recompressed batch too
        raise KafkaApiError(
            ErrorCode.message_too_large,
            f"batch recompressed as {config.compression_type} is {len(rebuilt)} bytes, "
            f"over max.message.bytes={config.max_message_bytes}",
        )
    return Batches(bytearray(rebuilt), validate_batches(rebuilt))


def _partition_response(
    module: Any, index: int, error: ErrorCode, base_offset: int, append_time: int,
    log_start: int, message: str | None, record_errors: tuple = (),
) -> Any:
    return make(
        module.PartitionProduceResponse, index=index, error_code=error, base_offset=base_offset,
        log_append_time=None if append_time < 0 else _datetime(append_time),
        log_start_offset=log_start, record_errors=record_errors, error_message=message,
    )


def _datetime(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
