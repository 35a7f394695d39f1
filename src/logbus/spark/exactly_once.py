"""Exactly-once streaming writes into topics, in the shape of Kafka's KIP-939.

Each Spark task of micro-batch B writes its rows inside a Kafka transaction and does not commit
it: it reports (transactional id, producer id, epoch) to the driver, whose `commit` ends every
task's transaction with EndTxn(commit) once all tasks succeeded (`abort`: EndTxn(abort)).

- **Fencing.** A task's transactional id is `<prefix>-<Spark partition id>`: a retried task,
  or the same task of a micro-batch replayed after a crash, asks InitProducerId for the same
  id, which aborts whatever the previous attempt left open and fences that attempt's writes.
- **The batch marker.** Inside its transaction, each task also commits (AddOffsetsToTxn +
  TxnOffsetCommit) offset B in its own consumer group `logbus-sink-<transactional id>`, for
  partition 0 of the target topic (the `topic` option, else the topic of the task's first
  row), with the task's row count as the offset's metadata. It becomes visible exactly when
  the task's rows do.
- **Replays.** Spark replays micro-batch B after a crash when B is not in the checkpoint's
  commit log, even if the driver had already committed some of B's transactions. So a task
  first fences (InitProducerId), then reads its group's offsets (OffsetFetch of all of them,
  require_stable): a marker at B or later means its transaction for B was committed; it
  writes nothing and checks that it was given as many rows as the committed attempt wrote.

This relies on a replay giving each Spark partition id the same rows, as a deterministic query
over a replayable source does. See docs/spark.md for what happens otherwise.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from kio.schema.errors import ErrorCode
from pyspark.sql.datasource import WriterCommitMessage

from ..client.errors import KafkaError
from .options import ExactlyOnce
from .partitioner import murmur2, partition_for
from .sink import Target, WriteError, binary_column
from .txn_client import ProducerId, Records, TopicPartition, TransactionalProducer, TxnClient, TxnError

MAX_BATCH_BYTES = 1_000_000  # under Kafka's default max.message.bytes (1048588)
ABORT_ON_FAILURE_S = 5.0
RECORD_OVERHEAD_BYTES = 16  # length, attributes, deltas, key/value lengths and header count, at most
BATCH_ID_PROPERTY = "streaming.sql.batchId"  # Spark's local properties of a micro-batch's tasks
QUERY_ID_PROPERTY = "sql.streaming.queryId"  # the query id, kept in the checkpoint
_ALREADY_ENDED = frozenset({ErrorCode.invalid_txn_state, ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch})


class ReplayMismatchError(WriteError):
    """A replayed task was given other rows than the attempt whose transaction committed."""


@dataclass
class Prepared(WriterCommitMessage):
    """A task's transaction, written but not committed; `producer` None: nothing to commit."""

    producer: ProducerId | None
    partitions: tuple[TopicPartition, ...]
    rows: int


@dataclass(frozen=True)
class TaskIdentity:
    """Who a task is across attempts and restarts, and which micro-batch it writes."""

    transactional_id: str
    partition_id: int
    batch_id: int

    @property
    def group_id(self) -> str:
        return f"logbus-sink-{self.transactional_id}"

    @classmethod
    def current(cls, prefix: str | None) -> TaskIdentity:
        from pyspark import TaskContext

        context = TaskContext.get()
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        if context is None or batch_id is None:
            raise WriteError("exactly-once writes run in a streaming query's tasks only")
        prefix = prefix or f"spark-{context.getLocalProperty(QUERY_ID_PROPERTY)}"
        return cls(f"{prefix}-{context.partitionId()}", context.partitionId(), int(batch_id))


def write_transaction(target: Target, settings: ExactlyOnce, batches: Iterator[pa.RecordBatch]) -> Prepared:
    """A task's rows into a transaction left open for the driver; nothing when the task has no
    rows or its transaction for this micro-batch was committed before."""
    first = next((batch for batch in batches if batch.num_rows), None)
    if first is None:
        return Prepared(None, (), 0)
    task = TaskIdentity.current(settings.prefix)
    client = TxnClient.from_settings(target.config)
    try:
        producer = client.init_producer_id(task.transactional_id, settings.transaction_timeout_ms)
        committed_batch, metadata = max(client.committed_offsets(task.group_id).values(), default=(-1, ""))
        rows = chain([first], batches)
        if committed_batch >= task.batch_id:
            _check_replay(task, metadata, sum(batch.num_rows for batch in rows))
            return Prepared(None, (), 0)
        return _write(client, producer, target, task, _marker_partition(target, first), rows)
    finally:
        client.close()


def _marker_partition(target: Target, first: pa.RecordBatch) -> TopicPartition:
    """Where the task's batch marker is committed: partition 0 of the target topic, or of the
    topic of the task's first row. Any partition would do (it must exist): the group is the
    task's own, and a replay reads all of its offsets."""
    topic = target.topic or first.column("topic")[0].as_py()
    if topic is None:
        raise WriteError("a row has a null topic and no topic option is set")
    return topic, 0


def _write(client: TxnClient, producer: ProducerId, target: Target, task: TaskIdentity, marker: TopicPartition,
           batches: Iterator[pa.RecordBatch]) -> Prepared:
    sender = TransactionalProducer(client, producer)
    router = Router(client, target)
    rows = 0
    try:
        for batch in batches:
            sender.send(router.chunks(batch))
            rows += batch.num_rows
        client.add_offsets(producer, task.group_id)
        client.txn_offset_commit(producer, task.group_id, marker, task.batch_id, json.dumps({"rows": rows}))
    except BaseException:
        _abort_quietly(client, producer)
        raise
    return Prepared(producer, sender.partitions, rows)


def _abort_quietly(client: TxnClient, producer: ProducerId) -> None:
    """A failing task aborts what it wrote, so that readers at read_committed are not held back
    until a retry fences it or the transaction times out (if the query gives up, neither comes
    soon). Best effort, briefly: the failure being raised matters more."""
    client.retry_for_s = ABORT_ON_FAILURE_S
    with contextlib.suppress(OSError, KafkaError):
        client.end_txn(producer, commit=False)


def _check_replay(task: TaskIdentity, metadata: str, rows: int) -> None:
    written = json.loads(metadata or "{}").get("rows")
    if written != rows:
        raise ReplayMismatchError(
            f"micro-batch {task.batch_id} is replayed with {rows} rows for Spark partition {task.partition_id}, "
            f"whose committed transaction wrote {written}: the query is not "
            "deterministic, so exactly-once output cannot be kept (restart with logbus.exactlyOnce=false to go on "
            "at least once)"
        )


def end_transactions(config: Mapping[str, str], messages: Sequence[WriterCommitMessage | None], commit: bool) -> None:
    """The driver's part: EndTxn for every prepared transaction, through a client of `config` (the
    sink's settings). An abort tolerates transactions already ended or taken over (Spark may abort
    after a commit that went through)."""
    prepared = [m.producer for m in messages if isinstance(m, Prepared) and m.producer is not None]
    if not prepared:
        return
    client = TxnClient.from_settings(config)
    try:
        for producer in prepared:
            try:
                client.end_txn(producer, commit)
            except TxnError as exc:
                if commit or exc.code not in _ALREADY_ENDED:
                    raise
    finally:
        client.close()


class Router:
    """Splits a task's rows into per-partition record batches, placed as the Java producer
    places them: the `partition` column when set, murmur2 of the key for keyed rows, and one
    partition per topic, chosen at random for each Arrow batch, for rows with neither."""

    def __init__(self, client: TxnClient, target: Target) -> None:
        self.client = client
        self.target = target
        self.partition_counts: dict[str, int] = {}

    def chunks(self, batch: pa.RecordBatch) -> dict[TopicPartition, list[Records]]:
        names, topic_index = self._topics(batch)
        partitions = self._partitions(batch, names, topic_index)
        headers = self._headers(batch)
        sizes = self._sizes(batch, headers)
        return {(names[index], partition): [self._records(batch, part, headers)
                                            for part in _split(rows, sizes[rows], MAX_BATCH_BYTES)]
                for (index, partition), rows in _groups(topic_index, partitions).items()}

    def _records(self, batch: pa.RecordBatch, rows: np.ndarray,
                 headers: list[list[tuple[str, bytes | None]]] | None) -> Records:
        picked = batch.take(pa.array(rows))
        keys = binary_column(picked, "key") if self.target.has_key else repeat(None)
        pairs = list(zip(keys, binary_column(picked, "value"), strict=False))
        return pairs, [headers[i] for i in rows.tolist()] if headers else None

    def _topics(self, batch: pa.RecordBatch) -> tuple[list[str], np.ndarray]:
        if self.target.topic:
            return [self.target.topic], np.zeros(batch.num_rows, dtype=np.int64)
        column = batch.column("topic")
        if column.null_count:
            raise WriteError("a row has a null topic and no topic option is set")
        encoded = pc.dictionary_encode(column)
        return encoded.dictionary.to_pylist(), encoded.indices.to_numpy().astype(np.int64)

    def _partitions(self, batch: pa.RecordBatch, names: list[str], topic_index: np.ndarray) -> np.ndarray:
        per_topic = [self._partition_count(name) for name in names]
        counts = np.array(per_topic, dtype=np.int64)[topic_index]
        partitions = np.full(batch.num_rows, -1, dtype=np.int64)
        if self.target.has_partition:
            partitions = batch.column("partition").fill_null(-1).to_numpy().astype(np.int64)
        if self.target.has_key:
            keys = batch.column("key")
            keyed = (partitions < 0) & keys.is_valid().to_numpy(zero_copy_only=False)
            partitions[keyed] = partition_for(murmur2(keys)[keyed], counts[keyed])
        unplaced = partitions < 0
        for index in np.unique(topic_index[unplaced]):
            partitions[unplaced & (topic_index == index)] = random.randrange(per_topic[index])
        outside = np.flatnonzero(partitions >= counts)
        if len(outside):
            row = int(outside[0])
            raise WriteError(f"partition {partitions[row]} of topic {names[topic_index[row]]} does not exist")
        return partitions

    def _partition_count(self, topic: str) -> int:
        if topic not in self.partition_counts:
            found = self.client.partitions([topic])
            if topic not in found:
                raise WriteError(f"topic {topic} does not exist")
            self.partition_counts[topic] = len(found[topic])
        return self.partition_counts[topic]

    def _headers(self, batch: pa.RecordBatch) -> list[list[tuple[str, bytes | None]]] | None:
        if not self.target.has_headers or batch.column("headers").null_count == batch.num_rows:
            return None
        return [[(h["key"], h["value"]) for h in row or ()] for row in batch.column("headers").to_pylist()]

    def _sizes(self, batch: pa.RecordBatch, headers: list[list[tuple[str, bytes | None]]] | None) -> np.ndarray:
        """Each record's encoded size, at most (for cutting batches below MAX_BATCH_BYTES)."""
        sizes = _lengths(batch.column("value")) + RECORD_OVERHEAD_BYTES
        if self.target.has_key:
            sizes += _lengths(batch.column("key"))
        if headers:
            sizes += np.array([sum(len(name) + len(value or b"") + 10 for name, value in row) for row in headers])
        return sizes


def _lengths(column: pa.Array) -> np.ndarray:
    return pc.binary_length(column).fill_null(0).to_numpy().astype(np.int64)


def _groups(topic_index: np.ndarray, partitions: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
    """Row numbers per (topic index, partition), in row order."""
    codes = (topic_index << 32) | partitions
    order = np.argsort(codes, kind="stable")
    starts = np.flatnonzero(np.diff(codes[order], prepend=-1))
    return {(int(codes[order[s]] >> 32), int(codes[order[s]] & 0xFFFFFFFF)): rows
            for s, rows in zip(starts, np.split(order, starts[1:]), strict=True)}


def _split(rows: np.ndarray, sizes: np.ndarray, limit: int) -> list[np.ndarray]:
    """`rows` cut into consecutive runs of at most `limit` bytes (a larger record alone)."""
    ends = np.cumsum(sizes)
    parts, begin = [], 0
    while begin < len(rows):
        reached = ends[begin - 1] if begin else 0
        end = max(int(np.searchsorted(ends, reached + limit, side="right")), begin + 1)
        parts.append(rows[begin:end])
        begin = end
    return parts
