"""The `logbus` data source: batch and streaming reads of topics, with Spark's Kafka face.

Planning happens on the driver (Metadata and ListOffsets through `logbus.client`); each
Spark input partition is an offset range of one topic partition, read on an executor by
`read_range`, which fetches raw record sets and yields Arrow record batches (`decode`). Both
reach secured listeners as the `kafka.`-prefixed security options say (`options.client_config`).

Data loss (records a query needs are gone: deleted by retention or DeleteRecords, or the
topic was deleted or recreated) is detected on the driver when planning and again on the
executor when a fetch answers OFFSET_OUT_OF_RANGE. With failOnDataLoss=true (the default) the
query fails naming the partition and offsets; with false it skips ahead to what is there.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from kio.schema.errors import ErrorCode
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ..client.client import EARLIEST, LATEST, READ_UNCOMMITTED, Client
from ..client.errors import KafkaError
from . import options as opts
from .decode import decode

SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int"
)
HEADERS_COLUMN = ", headers array<struct<key: string, value: binary>>"
FETCH_MAX_BYTES = 8 << 20
STALL_TIMEOUT_S = 120.0  # an executor gives up when a range makes no progress for this long
METADATA_REFRESH_S = 1.0  # how often a stream looks for new topics and partitions
LATEST_OFFSETS_TTL_S = 0.05  # an idle 0 s-trigger query asks for the latest offsets every ~10 ms
MIN_FETCH_BYTES = 64 << 10
FIRST_GUESS_RECORD_BYTES = 1024  # sizes a range's first fetch, before its record size is known


class DataLossError(RuntimeError):
    """Records the query needs are no longer in the log (and failOnDataLoss is true)."""


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark task's work: offsets [start, end) of one topic partition, and how to reach the
    cluster (`client_config`: settings, as a ClientSecurity's SSL context cannot be pickled)."""

    client_config: dict[str, str]
    topic: str
    partition: int
    start: int
    end: int
    include_headers: bool
    fail_on_data_loss: bool
    isolation_level: int = READ_UNCOMMITTED

    @property
    def size(self) -> int:
        return self.end - self.start


class LogbusDataSource(DataSource):
    """`spark.read.format("logbus")` and friends; options as Spark's Kafka source."""

    @classmethod
    def name(cls) -> str:
        return "logbus"

    def schema(self) -> str:
        return SCHEMA + (HEADERS_COLUMN if opts.flag(self.options, "includeHeaders", False) else "")

    def reader(self, schema: StructType) -> DataSourceReader:
        return LogbusBatchReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LogbusStreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import LogbusBatchWriter

        return LogbusBatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import LogbusStreamWriter

        return LogbusStreamWriter(self.options, schema)


# ---------------------------------------------------------------- driver side: planning


class _Planner:
    """What batch and stream readers share: the options, a client, offset resolution."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.client_config = opts.client_config(options)
        self.subscription = opts.subscription(options)
        self.include_headers = opts.flag(options, "includeHeaders", False)
        self.fail_on_data_loss = opts.flag(options, "failOnDataLoss", True)
        self.min_partitions = opts.positive_int(options, "minPartitions")
        self.by_timestamp_strategy = (options.get("startingOffsetsByTimestampStrategy") or "error").lower()
        self.isolation_level = opts.isolation_level(options)
        self._client: Client | None = None

    def __getstate__(self) -> dict:
        """Executors get a copy without the driver's connections."""
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client.from_settings(self.client_config)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def current_partitions(self) -> list[opts.TopicPartition]:
        return self.subscription.select(self.client.partitions(self.subscription.topic_names()))

    def resolve(self, spec: opts.OffsetSpec, partitions: list[opts.TopicPartition],
                kind: str) -> opts.Offsets:
        """Concrete offsets for `partitions` from an offset spec (earliest/latest/JSON/timestamps)."""
        if spec.global_timestamp is not None or spec.timestamps is not None:
            return self._by_timestamp(spec, partitions, kind)
        wanted = {tp: spec.offsets.get(tp, spec.default) for tp in partitions}
        symbolic = {tp: v for tp, v in wanted.items() if v in (EARLIEST, LATEST)}
        resolved = self.client.list_offsets(symbolic, self.isolation_level) if symbolic else {}
        return {tp: resolved.get(tp, v) for tp, v in wanted.items()}

    def _by_timestamp(self, spec: opts.OffsetSpec, partitions: list[opts.TopicPartition],
                      kind: str) -> opts.Offsets:
        if spec.global_timestamp is not None:
            stamps = dict.fromkeys(partitions, spec.global_timestamp)
        else:
            assert spec.timestamps is not None
            stamps = {tp: spec.timestamps[tp] for tp in partitions if tp in spec.timestamps}
            missing = sorted(set(partitions) - set(stamps))
            if missing:
                raise opts.OptionError(f"{kind}OffsetsByTimestamp names no timestamp for {missing}")
        found = self.client.list_offsets(stamps)
        latest = self.client.list_offsets(dict.fromkeys(stamps, LATEST), self.isolation_level)
        result = {}
        for tp, offset in found.items():
            if offset < 0 and kind == "starting" and self.by_timestamp_strategy == "error":
                raise opts.OptionError(
                    f"No offset in {tp[0]}-{tp[1]} has a timestamp at or after {stamps[tp]}; set "
                    'startingOffsetsByTimestampStrategy to "latest" to start at the end instead'
                )
            result[tp] = latest[tp] if offset < 0 else offset
        return result

    def ranges(self, start: opts.Offsets, end: opts.Offsets) -> list[OffsetRange]:
        """Offset ranges to read, checked against the log start offsets, split for minPartitions."""
        earliest = self.client.list_offsets(dict.fromkeys(end, EARLIEST)) if end else {}
        ranges = []
        for tp in sorted(end):
            first = start.get(tp, earliest[tp])  # a partition new since `start`: from its beginning
            first = self._check_loss(tp, first, end[tp], earliest[tp])
            if first < end[tp]:
                ranges.append(OffsetRange(self.client_config, tp[0], tp[1], first, end[tp],
                                          self.include_headers, self.fail_on_data_loss, self.isolation_level))
        for tp in sorted(set(start) - set(end)):
            self._lost(f"{tp[0]}-{tp[1]} is gone (topic deleted?) while the query still had to read from offset "
                       f"{start[tp]}")
        return split_ranges(ranges, self.min_partitions)

    def _check_loss(self, tp: opts.TopicPartition, first: int, last: int, log_start: int) -> int:
        if last < first:
            self._lost(f"{tp[0]}-{tp[1]} ends at offset {last}, before the query's offset {first} "
                       "(topic recreated?)")
            return last
        if first < log_start:
            self._lost(f"{tp[0]}-{tp[1]}: offsets {first} to {min(log_start, last) - 1} were deleted "
                       f"(log start offset is now {log_start})")
            return min(log_start, last)
        return first

    def _lost(self, what: str) -> None:
        if self.fail_on_data_loss:
            raise DataLossError(f"Some data may have been lost: {what}. {opts.DATA_LOSS_HINT}")


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Split big ranges so there are at least `min_partitions` tasks (when there are that many
    records): each range gets a share of `min_partitions` proportional to its size, rounded by
    largest remainder. (Spark's Kafka source rounds each share, so it may end up below the hint.)"""
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    shares = [r.size * min_partitions / total for r in ranges]
    parts = [max(1, int(share)) for share in shares]
    by_remainder = sorted(range(len(ranges)), key=lambda i: int(shares[i]) - shares[i])
    for i in by_remainder[: max(0, min_partitions - sum(parts))]:
        parts[i] += 1
    result = []
    for r, count in zip(ranges, parts, strict=True):
        count = min(count, r.size)
        bounds = [r.start + r.size * i // count for i in range(count + 1)]
        result += [dataclasses.replace(r, start=lo, end=hi) for lo, hi in zip(bounds, bounds[1:], strict=False)]
    return result


class LogbusBatchReader(DataSourceReader):
    """`spark.read`: startingOffsets default earliest, endingOffsets default latest."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.planner = _Planner(options)
        self.starting = opts.offset_spec(options, "starting", EARLIEST)
        self.ending = opts.offset_spec(options, "ending", LATEST)

    def partitions(self) -> list[OffsetRange]:
        try:
            current = self.planner.current_partitions()
            start = self.planner.resolve(self.starting, current, "starting")
            end = self.planner.resolve(self.ending, current, "ending")
            return self.planner.ranges(start, end)
        finally:
            self.planner.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        return read_range(partition)


class LogbusStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream`: startingOffsets default latest; admission control by record counts."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.planner = _Planner(options)
        self.starting = opts.offset_spec(options, "starting", LATEST)
        self.max_per_trigger = opts.positive_int(options, "maxOffsetsPerTrigger")
        self.min_per_trigger = opts.positive_int(options, "minOffsetsPerTrigger")
        self.max_trigger_delay_s = opts.duration_s(options, "maxTriggerDelay", "15m")
        self.available_now_target: opts.Offsets | None = None
        self._partitions: list[opts.TopicPartition] = []
        self._partitions_at = 0.0
        self._latest_offsets: opts.Offsets = {}
        self._latest_at = float("-inf")
        self._last_batch_at = time.monotonic()

    def initialOffset(self) -> dict:
        return opts.to_json(self.planner.resolve(self.starting, self._known_partitions(), "starting"))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_per_trigger:
            return ReadMaxRows(self.max_per_trigger)
        if self.min_per_trigger:
            return ReadMinRows(self.min_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now_target = self._ask_latest()

    def reportLatestOffset(self) -> dict:
        return opts.to_json(self._latest())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next micro-batch: the latest offsets (or the AvailableNow target), capped
        by the read limit. Partitions new since `start` begin at their earliest offset; partitions
        that disappeared are left out, which `partitions()` reports as data loss."""
        begin = opts.from_json(start)
        end = dict(self.available_now_target or self._latest())
        new = [tp for tp in end if tp not in begin]
        if new:
            begin.update(self.planner.client.list_offsets(dict.fromkeys(new, EARLIEST)))
        if not isinstance(limit, ReadAllAvailable):
            end = self._admit(begin, end)
        if any(end[tp] > begin[tp] for tp in end):
            self._last_batch_at = time.monotonic()
        return opts.to_json(end)

    def _admit(self, begin: opts.Offsets, end: opts.Offsets) -> opts.Offsets:
        """Apply minOffsetsPerTrigger (+ maxTriggerDelay) and maxOffsetsPerTrigger."""
        backlog = {tp: max(end[tp] - begin[tp], 0) for tp in end}
        total = sum(backlog.values())
        if (self.min_per_trigger and self.available_now_target is None and total < self.min_per_trigger
                and time.monotonic() - self._last_batch_at < self.max_trigger_delay_s):
            return {tp: min(begin[tp], end[tp]) for tp in end}
        if self.max_per_trigger and total > self.max_per_trigger:
            return prorate(begin, end, backlog, total, self.max_per_trigger)
        return end

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        if start == end:
            return []
        return self.planner.ranges(opts.from_json(start), opts.from_json(end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        return read_range(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in consumer-group offsets."""

    def stop(self) -> None:
        self.planner.close()

    def _known_partitions(self) -> list[opts.TopicPartition]:
        """The subscribed partitions, refreshed from Metadata at most once a second."""
        now = time.monotonic()
        if not self._partitions or now - self._partitions_at >= METADATA_REFRESH_S:
            self._partitions = self.planner.current_partitions()
            self._partitions_at = now
        return self._partitions

    def _latest(self) -> opts.Offsets:
        """The partitions' end offsets, asked for at most every LATEST_OFFSETS_TTL_S: Spark polls an
        idle query's source every 10 ms (spark.sql.streaming.pollingDelay); a busy query's calls are
        a micro-batch apart, so they always ask."""
        now = time.monotonic()
        if now - self._latest_at >= LATEST_OFFSETS_TTL_S:
            self._latest_offsets = self._ask_latest()
            self._latest_at = now
        return self._latest_offsets

    def _ask_latest(self) -> opts.Offsets:
        partitions = self._known_partitions()
        if not partitions:
            return {}
        return self.planner.client.list_offsets(dict.fromkeys(partitions, LATEST), self.planner.isolation_level)


def prorate(begin: opts.Offsets, end: opts.Offsets, backlog: dict, total: int, limit: int) -> opts.Offsets:
    """Spread `limit` records over partitions in proportion to their backlog (Spark's rule)."""
    result = {}
    for tp, size in backlog.items():
        share = limit * size / total
        step = int(share) if share >= 1 else (1 if size else 0)
        result[tp] = end[tp] if size == 0 else begin[tp] + min(size, step)
    return result


# ---------------------------------------------------------------- executor side: reading


def read_range(task: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Yield Arrow batches holding offsets [task.start, task.end) of one partition."""
    _exempt_imports_from_gc()
    client = Client.from_settings(task.client_config)
    try:
        yield from _fetch_range(client, task)
    finally:
        client.close()


@functools.cache
def _exempt_imports_from_gc() -> None:
    """Freeze what this worker process holds now (once per process) out of the collector's reach.

    Spark's Python worker runs a full `gc.collect()` after every task; it walks every object the
    imports made (pyspark, pyarrow, numpy, the protocol classes: some 56k objects, ~20 ms), and
    in a stream of small micro-batches that was the largest cost of a task. Objects frozen here
    live as long as the process anyway."""
    gc.freeze()


def _fetch_range(client: Client, task: OffsetRange) -> Iterator[pa.RecordBatch]:
    position = task.start
    stalled_since = time.monotonic()
    record_size = float(FIRST_GUESS_RECORD_BYTES)  # bytes per offset, then learnt from each fetch
    while position < task.end:
        answer = client.fetch(task.topic, task.partition, position, _fetch_size(task.end - position, record_size),
                              isolation_level=task.isolation_level)
        if answer.error == ErrorCode.offset_out_of_range:
            position = _out_of_range(task, position, answer.log_start_offset, answer.high_watermark)
            continue
        if answer.error != ErrorCode.none:
            _retry_later(task, answer.error, stalled_since)
            continue
        batch, next_offset = decode(answer.records, task.topic, task.partition, position, task.end,
                                    task.include_headers, answer.aborted)
        if batch is not None:
            yield batch
        if next_offset > position:
            record_size = len(answer.records) / (next_offset - position)
            position = next_offset
            stalled_since = time.monotonic()
        elif answer.high_watermark <= position:
            position = _ended_early(task, position, answer.high_watermark, stalled_since)


def _fetch_size(remaining: int, record_size: float) -> int:
    """Bytes to ask for: what the rest of the range takes (and some). The broker reads and sends
    that much, and answers with at least one whole batch anyway, so a guess too small costs one
    more round trip and a guess too large a transfer the range does not need."""
    return max(MIN_FETCH_BYTES, min(FETCH_MAX_BYTES, int(remaining * record_size * 1.1)))


def _out_of_range(task: OffsetRange, position: int, log_start: int, high_watermark: int) -> int:
    """The fetch offset is outside the log: deleted records (skip or fail) or a truncated log."""
    if position < log_start:
        if task.fail_on_data_loss:
            raise DataLossError(
                f"Some data may have been lost: {task.topic}-{task.partition} offsets {position} to "
                f"{min(log_start, task.end) - 1} were deleted (log start offset is now {log_start}). "
                f"{opts.DATA_LOSS_HINT}"
            )
        return min(log_start, task.end)
    if task.fail_on_data_loss:
        raise DataLossError(
            f"Some data may have been lost: {task.topic}-{task.partition} ends at {high_watermark}, before "
            f"offset {position} the query had planned to read. {opts.DATA_LOSS_HINT}"
        )
    return task.end


def _ended_early(task: OffsetRange, position: int, high_watermark: int, stalled_since: float) -> int:
    """Nothing at `position` and the log ends there: wait for a lagging leader, then give up."""
    if time.monotonic() - stalled_since < STALL_TIMEOUT_S:
        time.sleep(0.1)  # the broker's own max_wait already paced the fetch; this bounds a hot loop
        return position
    return _out_of_range(task, position, -1, high_watermark)


def _retry_later(task: OffsetRange, error: ErrorCode, stalled_since: float) -> None:
    if time.monotonic() - stalled_since > STALL_TIMEOUT_S:
        raise KafkaError(f"fetching {task.topic}-{task.partition}: {error.name} for {STALL_TIMEOUT_S:.0f}s")
    time.sleep(0.2)
