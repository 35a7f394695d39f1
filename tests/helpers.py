"""Test helpers shared by the suite: polling with a deadline, and reading a topic back."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import Consumer, Message, Producer, TopicPartition

T = TypeVar("T")

QUIET = {"log_level": 0}  # librdkafka logs every reconnect to stderr otherwise


def wait_until(condition: Callable[[], T], timeout: float = 10.0, interval: float = 0.05,
               message: str = "condition") -> T:
    """Poll `condition` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def produce_all(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]],
                **config: object) -> None:
    """Produce (key, value) pairs with confluent-kafka and wait until all are acknowledged."""
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, **QUIET, **config})
    for key, value in records:
        producer.produce(topic, key=key, value=value, on_delivery=lambda err, _m: err and errors.append(err))
    assert producer.flush(30) == 0, "records left unacknowledged"
    assert not errors, errors


def consume_partition(bootstrap: str, topic: str, partition: int, count: int, start: int = 0,
                      timeout: float = 20.0) -> list[Message]:
    """Read `count` records of one partition from `start` with confluent-kafka (no group)."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "logbus-tests", "enable.auto.commit": False, **QUIET,
    })
    consumer.assign([TopicPartition(topic, partition, start)])
    messages: list[Message] = []
    deadline = time.monotonic() + timeout
    try:
        while len(messages) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            messages.append(message)
    finally:
        consumer.close()
    assert len(messages) == count, f"read {len(messages)} of {count} records"
    return messages
