"""What the single-broker benches (txn, metrics, security) share: a fresh topic, bounded produce
and consume loops with confluent-kafka, and the broker's CPU seconds around a timed run.

`config` is always a confluent-kafka client config naming the broker (`bootstrap.servers`, and
the security settings of the listener it talks to).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

QUIET = {"log_level": 0}
DEADLINE_S = 300  # every loop here ends by then at the latest


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process `pid` so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def new_topic(config: dict[str, Any]) -> str:
    """A fresh one-partition topic."""
    name = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config)  # referenced until the result is in: a collected client fails its futures
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


def send(producer: Producer, topic: str, value: bytes) -> None:
    """Produce one record to partition 0, waiting for room in the client's queue."""
    while True:
        try:
            producer.produce(topic, value, partition=0)
            return
        except BufferError:
            producer.poll(0.01)


def flush(producer: Producer) -> None:
    if producer.flush(DEADLINE_S):
        raise RuntimeError("records left unacknowledged")


def produce(config: dict[str, Any], topic: str, records: int, value: bytes, **settings: Any) -> None:
    """`records` copies of `value` (`linger.ms` 5 unless `settings` say otherwise), all acknowledged."""
    producer = Producer({"linger.ms": 5, **config, **settings})
    for _ in range(records):
        send(producer, topic, value)
    flush(producer)


def consume(config: dict[str, Any], topic: str, records: int, **settings: Any) -> None:
    """Read `records` records of partition 0 from the start, in batches of 10,000.

    librdkafka pauses a partition's fetches for `fetch.queue.backoff.ms` (1 s) once its local
    queue holds `queued.min.messages` (100,000): against a fast broker that pause, not the broker,
    set the pace, and rates came out bimodal (about 100k or 400k records/s). Here the threshold
    is raised and the pause cut to 10 ms (as in broker_bench), so the client keeps fetching."""
    consumer = Consumer({**config, "group.id": "bench", "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                         "queued.min.messages": 2_000_000, "fetch.queue.backoff.ms": 10, **settings})
    consumer.assign([TopicPartition(topic, 0, 0)])
    read, deadline = 0, time.monotonic() + DEADLINE_S
    try:
        while read < records:
            if time.monotonic() > deadline:
                raise RuntimeError(f"read {read} of {records} records")
            read += sum(1 for m in consumer.consume(10_000, 0.5) if m.error() is None)
    finally:
        consumer.close()


def timed(pid: int, work: Callable[[], None], records: int, record_bytes: int | None = None) -> dict[str, float]:
    """Run `work` (`records` records); its rate, MB/s when `record_bytes` is given, and the CPU
    seconds process `pid` (the broker) and this process (the client: librdkafka's threads are
    this process's) spent meanwhile."""
    cpu_before, client_before, started = cpu_seconds(pid), time.process_time(), time.perf_counter()
    work()
    elapsed = time.perf_counter() - started
    result = {"records_s": round(records / elapsed)}
    if record_bytes is not None:
        result["mb_s"] = round(records * record_bytes / elapsed / 1e6, 1)
    result["broker_cpu_s"] = round(cpu_seconds(pid) - cpu_before, 2)
    result["client_cpu_s"] = round(time.process_time() - client_before, 2)
    return result


def write_results(path: str, results: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=1)
