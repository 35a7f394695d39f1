"""The message browser: records of one partition from an offset or a timestamp, shown as text, JSON or hex.

A Consumer with `assign()` reads them: it never joins a group and never commits (the `group.id`
librdkafka insists on is never used). Everything shown is bounded: at most `MAX_LIMIT` records and
`MAX_FIELD_BYTES` bytes of each key, value and header.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from .cluster_view import ClusterView, ConsoleError

MAX_LIMIT = 500
DEFAULT_LIMIT = 50
MAX_FIELD_BYTES = 4096
FORMATS = ("text", "json", "hex")
BROWSER_GROUP = "logbus-console-browser"  # required by librdkafka; unused with assign() and no commits


@dataclass(frozen=True, slots=True)
class Query:
    partition: int
    offset: int | None
    timestamp_ms: int | None
    limit: int
    format: str


@dataclass(frozen=True, slots=True)
class Record:
    partition: int
    offset: int
    timestamp_ms: int
    key: str
    value: str
    headers: list[tuple[str, str]]


def render_bytes(data: bytes | None, form: str) -> str:
    """`data` as the operator asked: UTF-8 text (bad bytes replaced), pretty JSON (text if it is not
    JSON), or hex; cut at MAX_FIELD_BYTES with a note of the full size."""
    if data is None:
        return "(null)"
    shown = data[:MAX_FIELD_BYTES]
    suffix = f" … ({len(data)} bytes, first {MAX_FIELD_BYTES} shown)" if len(data) > MAX_FIELD_BYTES else ""
    if form == "hex":
        return shown.hex(" ") + suffix
    text = shown.decode("utf-8", errors="replace")
    if form == "json" and not suffix:
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pass
    return text + suffix


def browse(view: ClusterView, topic: str, query: Query) -> list[Record]:
    partitions = {p.id for p in view.topic(topic).partitions}
    if query.partition not in partitions:
        raise ConsoleError(f"topic '{topic}' has no partition {query.partition}", 404)
    start = _start_offset(view, topic, query)
    end = view.offsets([(topic, query.partition)], "latest")[(topic, query.partition)]
    wanted = min(query.limit, max(end - start, 0))
    return [_record(message, query.format) for message in _read(view, topic, query.partition, start, wanted)]


def _start_offset(view: ClusterView, topic: str, query: Query) -> int:
    key = (topic, query.partition)
    if query.timestamp_ms is not None:
        found = view.offsets([key], query.timestamp_ms)[key]
        return found if found >= 0 else view.offsets([key], "latest")[key]
    earliest = view.offsets([key], "earliest")[key]
    return max(query.offset if query.offset is not None else earliest, earliest)


def _read(view: ClusterView, topic: str, partition: int, start: int, wanted: int) -> list[Any]:
    if wanted <= 0:
        return []
    kafka = view.kafka
    consumer = kafka.Consumer({**view.config, "group.id": BROWSER_GROUP, "enable.auto.commit": False,
                               "enable.partition.eof": True})
    messages: list[Any] = []
    deadline = time.monotonic() + view.timeout_s
    try:
        consumer.assign([kafka.TopicPartition(topic, partition, start)])
        while len(messages) < wanted and time.monotonic() < deadline:
            batch = consumer.consume(wanted - len(messages), timeout=0.5)
            for message in batch:
                if message.error() is None:
                    messages.append(message)
                elif message.error().code() == kafka.KafkaError._PARTITION_EOF:
                    return messages
                else:
                    raise ConsoleError(f"reading {topic}-{partition}: {message.error().str()}", 502)
    finally:
        consumer.close()
    return messages


def _record(message: Any, form: str) -> Record:
    headers = [(name, render_bytes(value, form)) for name, value in (message.headers() or [])]
    return Record(message.partition(), message.offset(), message.timestamp()[1],
                  render_bytes(message.key(), form), render_bytes(message.value(), form), headers)
