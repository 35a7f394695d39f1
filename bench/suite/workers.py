"""Client processes written in Python: Redis Streams and NATS JetStream load, and end-to-end latency probes.

    python -m bench.suite.workers KIND '{"json": "args"}'

Each worker prints one JSON line with its result. Every loop stops at its record count or its
`seconds` budget, whichever comes first, so a slow system yields a rate instead of a hang.
Latency payloads start with the send time from CLOCK_MONOTONIC (one clock for all processes).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import json
import math
import struct
import sys
import time

STAMP = struct.Struct("<q")
WARMUP_S = 1.0


def _ready() -> None:
    """Tell the runner the consumer is subscribed, so it can start the producer."""
    print(json.dumps({"ready": True}), flush=True)


def _payload(size: int) -> bytes:
    return bytes(size)


def _stamped(size: int) -> bytes:
    return STAMP.pack(time.monotonic_ns()) + bytes(max(size - STAMP.size, 0))


def _percentiles(latencies_ns: list[int]) -> dict[str, float]:
    if not latencies_ns:
        return {"p50_ms": float("nan"), "p99_ms": float("nan"), "p999_ms": float("nan"), "samples": 0}
    ordered = sorted(latencies_ns)

    def pick(q: float) -> float:
        return ordered[min(int(q * len(ordered)), len(ordered) - 1)] / 1e6

    return {"p50_ms": pick(0.5), "p99_ms": pick(0.99), "p999_ms": pick(0.999), "samples": len(ordered)}


class Stamps:
    """Send and receive times of each record, in two arrays of ints.

    Not a list of tuples: every tuple is an object the consumer's garbage collector walks, and
    its full collection of ~50k of them paused the measuring consumer ~50 ms, which showed as
    latency of the system measured.
    """

    def __init__(self) -> None:
        self.sent = array.array("q")
        self.received = array.array("q")

    def add(self, sent_ns: int, received_ns: int) -> None:
        self.sent.append(sent_ns)
        self.received.append(received_ns)

    def after_warmup(self) -> list[int]:
        """Latencies of records sent after the first second (connection set-up and first fetches excluded)."""
        if not self.sent:
            return []
        start = min(self.sent) + int(WARMUP_S * 1e9)
        return [received - sent for sent, received in zip(self.sent, self.received, strict=True) if sent >= start]


TICK_S = 0.001


class Pacer:
    """Fixed offered rate in 1 ms ticks: how many records are due now."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.started = time.monotonic()
        self.sent = 0

    def due(self) -> int:
        return max(int((time.monotonic() - self.started) * self.rate) - self.sent, 0)

    def wait(self) -> float:
        """Seconds until the next tick's records are due.

        A tick is 1 ms (at least one record): a sender woken for every record at 10k/s would
        spend most of a core waking, and that core is taken from the servers it measures.
        """
        per_tick = max(int(self.rate * TICK_S), 1)
        return max((self.sent + per_tick) / self.rate - (time.monotonic() - self.started), 0.0)


# --- Redis Streams (redis-py, pipelined) --------------------------------------------------------------------

def redis_produce(port: int, streams: list[str], size: int, count: int, seconds: float,
                  pipeline: int = 1000) -> dict:
    import redis

    client = redis.Redis(port=port)
    payload, sent, turn = _payload(size), 0, 0
    started = time.perf_counter()
    while sent < count and time.perf_counter() - started < seconds:
        pipe = client.pipeline(transaction=False)
        batch = min(pipeline, count - sent)
        key = streams[turn % len(streams)]
        for _ in range(batch):
            pipe.xadd(key, {"d": payload})
        pipe.execute()
        sent, turn = sent + batch, turn + 1
    return {"records": sent, "seconds": time.perf_counter() - started}


def redis_consume(port: int, stream: str, group: str, count: int, seconds: float) -> dict:
    import redis

    client = redis.Redis(port=port)
    client.xgroup_create(stream, group, id="0")
    seen = 0
    started = time.perf_counter()
    while seen < count and time.perf_counter() - started < seconds:
        reply = client.xreadgroup(group, "c", {stream: ">"}, count=10_000, block=100, noack=True)
        seen += sum(len(entries) for _, entries in reply)
    return {"records": seen, "seconds": time.perf_counter() - started}


def redis_latency_consume(port: int, stream: str, seconds: float) -> dict:
    import redis

    client = redis.Redis(port=port)
    last, stamps = "0-0", Stamps()
    _ready()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _, entries in client.xread({stream: last}, count=1000, block=100):
            now = time.monotonic_ns()
            for entry_id, fields in entries:
                stamps.add(STAMP.unpack_from(fields[b"d"])[0], now)
                last = entry_id
    return _percentiles(stamps.after_warmup())


def redis_latency_produce(port: int, stream: str, size: int, rate: int, seconds: float) -> dict:
    import redis

    client = redis.Redis(port=port)
    pacer = Pacer(rate)
    while time.monotonic() - pacer.started < seconds:
        due = pacer.due()
        if due:
            pipe = client.pipeline(transaction=False)
            for _ in range(due):
                pipe.xadd(stream, {"d": _stamped(size)})
            pipe.execute()
            pacer.sent += due
        else:
            time.sleep(pacer.wait())
    return {"records": pacer.sent, "seconds": time.monotonic() - pacer.started}


# --- NATS JetStream (nats-py, async acks) -------------------------------------------------------------------

async def _nats(port: int):
    import nats

    client = await nats.connect(f"nats://127.0.0.1:{port}", max_reconnect_attempts=0)
    return client, client.jetstream(publish_async_max_pending=10_000)


async def _nats_produce(port: int, subjects: list[str], size: int, count: int, seconds: float) -> dict:
    client, js = await _nats(port)
    payload, sent = _payload(size), 0
    started = time.perf_counter()
    while sent < count and time.perf_counter() - started < seconds:
        batch = min(1000, count - sent)
        subject = subjects[(sent // 1000) % len(subjects)]
        for _ in range(batch):
            await js.publish_async(subject, payload)
        sent += batch
    await asyncio.wait_for(js.publish_async_completed(), timeout=60)
    elapsed = time.perf_counter() - started
    await client.close()
    return {"records": sent, "seconds": elapsed}


async def _nats_consume(port: int, subject: str, count: int, seconds: float) -> dict:
    client, js = await _nats(port)
    seen = 0
    done = asyncio.Event()

    async def on_message(_message) -> None:
        nonlocal seen
        seen += 1
        if seen >= count:
            done.set()

    started = time.perf_counter()
    subscription = await js.subscribe(subject, cb=on_message, ordered_consumer=True)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), timeout=seconds)
    elapsed = time.perf_counter() - started
    await subscription.unsubscribe()
    await client.close()
    return {"records": seen, "seconds": elapsed}


async def _nats_latency_consume(port: int, subject: str, seconds: float) -> dict:
    client, js = await _nats(port)
    stamps = Stamps()

    async def on_message(message) -> None:
        stamps.add(STAMP.unpack_from(message.data)[0], time.monotonic_ns())

    subscription = await js.subscribe(subject, cb=on_message, ordered_consumer=True)
    _ready()
    await asyncio.sleep(seconds)
    await subscription.unsubscribe()
    await client.close()
    return _percentiles(stamps.after_warmup())


async def _nats_latency_produce(port: int, subject: str, size: int, rate: int, seconds: float) -> dict:
    client, js = await _nats(port)
    pacer = Pacer(rate)
    while time.monotonic() - pacer.started < seconds:
        due = pacer.due()
        for _ in range(due):
            await js.publish_async(subject, _stamped(size))
        pacer.sent += due
        await asyncio.sleep(pacer.wait() if not due else 0)
    await asyncio.wait_for(js.publish_async_completed(), timeout=30)
    await client.close()
    return {"records": pacer.sent, "seconds": time.monotonic() - pacer.started}


def nats_setup(port: int, streams: list[str]) -> dict:
    """One file-storage stream per partition, subject == stream name."""

    async def create() -> None:
        from nats.js.api import StorageType

        client, js = await _nats(port)
        for name in streams:
            await js.add_stream(name=name, subjects=[name], storage=StorageType.FILE)
        await client.close()

    asyncio.run(create())
    return {"streams": len(streams)}


def nats_produce(port: int, subjects: list[str], size: int, count: int, seconds: float) -> dict:
    return asyncio.run(_nats_produce(port, subjects, size, count, seconds))


def nats_consume(port: int, subject: str, count: int, seconds: float) -> dict:
    return asyncio.run(_nats_consume(port, subject, count, seconds))


def nats_latency_consume(port: int, subject: str, seconds: float) -> dict:
    return asyncio.run(_nats_latency_consume(port, subject, seconds))


def nats_latency_produce(port: int, subject: str, size: int, rate: int, seconds: float) -> dict:
    return asyncio.run(_nats_latency_produce(port, subject, size, rate, seconds))


# --- Kafka protocol latency (confluent-kafka = librdkafka, the same library as rdkafka_performance) -------

def kafka_latency_consume(bootstrap: str, topic: str, seconds: float) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "latency", "enable.auto.commit": False,
                         "log_level": 0})
    consumer.assign([TopicPartition(topic, 0, 0)])
    stamps = Stamps()
    consumer.consume(1, 0.5)  # joins the partition: the fetch session exists before the producer starts
    _ready()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        first = consumer.poll(0.05)  # returns as soon as one record is there (consume(n, t) waits for n or t)
        if first is None:
            continue
        for message in [first, *consumer.consume(1000, 0)]:
            if message.error() is None:
                stamps.add(STAMP.unpack_from(message.value())[0], time.monotonic_ns())
    consumer.close()
    return _percentiles(stamps.after_warmup())


def kafka_latency_produce(bootstrap: str, topic: str, size: int, rate: int, seconds: float, acks: str = "1") -> dict:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 1, "log_level": 0})
    pacer = Pacer(rate)
    while time.monotonic() - pacer.started < seconds:
        due = pacer.due()
        for _ in range(due):
            producer.produce(topic, _stamped(size), partition=0)
        pacer.sent += due
        producer.poll(math.ceil(pacer.wait() * 1000) / 1000 if not due else 0)  # librdkafka waits whole ms
    producer.flush(30)
    return {"records": pacer.sent, "seconds": time.monotonic() - pacer.started}


WORKERS = {name: func for name, func in globals().items()
           if callable(func) and name.split("_")[0] in ("redis", "nats", "kafka")}


def main() -> int:
    kind, arguments = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(WORKERS[kind](**arguments)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
