"""Writing DataFrames to logbus topics (`df.write` / `df.writeStream` `.format("logbus")`).

Input columns, as Spark's Kafka sink takes them: `value` (binary or string, required), `key`
(binary or string, optional), `topic` (string; the `topic` option, when set, wins over it),
`partition` (int, optional: null or absent lets the partitioner choose) and `headers`
(array<struct<key string, value binary>>, optional).

Streaming writes are exactly once by default (`logbus.exactlyOnce`): see
`logbus.spark.exactly_once`. The rest of this module is the at-least-once path, for `df.write`
and for streams with `logbus.exactlyOnce=false`.

Each Spark task produces its rows with confluent-kafka (`partitioner=murmur2_random`: a keyed
row lands where Java's default partitioner would put it; unkeyed rows spread randomly),
waits for every acknowledgement and fails the task on any delivery error (or at once on a
refused login or TLS handshake). Options prefixed `kafka.` (or `logbus.`) go to the producer
(e.g. `kafka.linger.ms`, `kafka.enable.idempotence`), the Java client's security settings in
librdkafka's names (`options.librdkafka_names`).

Delivery is at least once, as with Spark's Kafka sink. Nothing is staged: what a task sent is
visible to consumers at once, and `commit`/`abort` have nothing to undo. So duplicates appear
when (1) a task fails after some of its rows were acknowledged and Spark retries it (the retry
sends all of the task's rows again), (2) a streaming query dies after its tasks wrote a
micro-batch but before Spark recorded that batch in the checkpoint's commit log (on restart the
whole micro-batch is written again), (3) the producer retries a request whose
acknowledgement was lost (unless `kafka.enable.idempotence=true`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from . import options as opts

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Producer

FLUSH_TIMEOUT_S = 120.0


class WriteError(RuntimeError):
    """Records were not acknowledged by the broker."""


@dataclass
class Written(WriterCommitMessage):
    rows: int


@dataclass(frozen=True)
class Target:
    """What every task needs, checked once on the driver."""

    config: dict[str, str]
    topic: str | None
    has_key: bool
    has_partition: bool
    has_headers: bool


def parse_target(options: Mapping[str, str], schema: StructType) -> Target:
    names = {field.name.lower(): field for field in schema.fields}
    if "value" not in names:
        raise opts.OptionError('the DataFrame to write needs a "value" column')
    for name in ("key", "value"):
        if name in names and not isinstance(names[name].dataType, BinaryType | StringType):
            raise opts.OptionError(f'column "{name}" must be binary or string')
    if "partition" in names and not isinstance(names["partition"].dataType, IntegerType):
        raise opts.OptionError('column "partition" must be int')
    topic = options.get("topic")
    if not topic and "topic" not in names:
        raise opts.OptionError('set the "topic" option or give the DataFrame a "topic" column')
    config = {"partitioner": "murmur2_random", "acks": "all", "linger.ms": "5", "log_level": "0",
              **opts.client_config(options)}
    return Target(config, topic, "key" in names, "partition" in names, "headers" in names)


def produce_batches(target: Target, batches: Iterator[pa.RecordBatch]) -> Written:
    """Send every row, wait for all acknowledgements, fail on any delivery error."""
    from confluent_kafka import Producer

    acks = _Acks()
    producer = Producer({**target.config, "error_cb": acks.client_error})
    rows = 0
    for batch in batches:
        rows += _produce_batch(producer, target, batch, acks)
        if acks.failed:
            break
    left = _flush(producer, acks)
    if acks.failed or left:
        raise WriteError(f"{len(acks.failed)} records failed ({acks.failed[:3]}), {left} unacknowledged")
    return Written(rows)


class _Acks:
    """What the producer reports: failed deliveries, and a failed login or TLS handshake. librdkafka
    retries those until the records time out (`message.timeout.ms`, 5 minutes by default), so the
    write gives up on the first one instead."""

    def __init__(self) -> None:
        self.failed: list[str] = []
        self.refused: str | None = None

    def delivered(self, error: object, _message: object) -> None:
        if error is not None:
            self.failed.append(str(error))

    def client_error(self, error: KafkaError) -> None:
        if error.name() in ("_AUTHENTICATION", "_SSL"):
            self.refused = error.str()

    def check_refused(self) -> None:
        if self.refused is not None:
            raise WriteError(f"the producer cannot connect: {self.refused}")


def _flush(producer: Producer, acks: _Acks) -> int:
    """Wait up to FLUSH_TIMEOUT_S for the acknowledgements, a second at a time to notice a refusal;
    how many records are left unacknowledged."""
    deadline = time.monotonic() + FLUSH_TIMEOUT_S
    while True:
        left = producer.flush(min(1.0, max(deadline - time.monotonic(), 0.0)))
        acks.check_refused()
        if not left or time.monotonic() >= deadline:
            return left


def _produce_batch(producer: Producer, target: Target, batch: pa.RecordBatch, acks: _Acks) -> int:
    count = batch.num_rows
    values = binary_column(batch, "value")
    keys = binary_column(batch, "key") if target.has_key else [None] * count
    topics = [target.topic] * count if target.topic else batch.column("topic").to_pylist()
    partitions = batch.column("partition").to_pylist() if target.has_partition else [None] * count
    headers = batch.column("headers").to_pylist() if target.has_headers else [None] * count
    produce = producer.produce
    for key, value, topic, partition, header in zip(keys, values, topics, partitions, headers, strict=True):
        if topic is None:
            raise WriteError("a row has a null topic and no topic option is set")
        extra = {} if partition is None else {"partition": partition}
        if header:
            extra["headers"] = [(h["key"], h["value"]) for h in header]
        while True:
            try:
                produce(topic, value=value, key=key, on_delivery=acks.delivered, **extra)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
                acks.check_refused()
    producer.poll(0)
    acks.check_refused()
    return count


def binary_column(batch: pa.RecordBatch, name: str) -> list[bytes | None]:
    column = batch.column(name)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = pc.cast(column, pa.binary())
    return column.to_pylist()


class LogbusBatchWriter(DataSourceArrowWriter):
    """`df.write.format("logbus")`: each task produces its rows; see the module notes."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.target = parse_target(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return produce_batches(self.target, iterator)

    def commit(self, messages: list) -> None:
        """Rows are visible as soon as they are acknowledged: nothing left to publish."""

    def abort(self, messages: list) -> None:
        """Acknowledged rows cannot be taken back (at-least-once); nothing to undo."""


class LogbusStreamWriter(DataSourceStreamArrowWriter):
    """`df.writeStream.format("logbus")`: exactly once through transactions (logbus.spark.exactly_once),
    or with `logbus.exactlyOnce=false` each micro-batch as a batch write, at least once."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.target = parse_target(options, schema)
        self.exactly_once = opts.exactly_once(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if self.exactly_once is None:
            return produce_batches(self.target, iterator)
        from .exactly_once import write_transaction

        return write_transaction(self.target, self.exactly_once, iterator)

    def commit(self, messages: list, batchId: int) -> None:
        """Exactly once: commit every task's transaction. At least once: nothing left to publish."""
        self._end(messages, commit=True)

    def abort(self, messages: list, batchId: int) -> None:
        """Exactly once: abort the tasks' transactions. At least once: acknowledged rows stay."""
        self._end(messages, commit=False)

    def _end(self, messages: list, commit: bool) -> None:
        if self.exactly_once is not None:
            from .exactly_once import end_transactions

            end_transactions(self.target.config, messages, commit)
