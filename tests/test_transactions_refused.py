"""Until transactions exist, every client's init_transactions() fails at once instead of retrying."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import aiokafka
import aiokafka.errors
import kafka
import kafka.errors
import pytest
from confluent_kafka import KafkaException, Producer
from helpers import QUIET, raw_request

from logbus.testing import BrokerProcess, running_broker

FIND_COORDINATOR, TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 10, 53
PROMPTLY_S = 5.0


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker() as started:
        yield started


def test_find_coordinator_for_a_transactional_id_is_refused(broker: BrokerProcess) -> None:
    old = raw_request(broker.bootstrap, FIND_COORDINATOR, 3, key="txn", key_type=1)
    assert old.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    batched = raw_request(broker.bootstrap, FIND_COORDINATOR, 4, key_type=1, coordinator_keys=("a", "b"))
    assert [c.error_code for c in batched.coordinators] == [TRANSACTIONAL_ID_AUTHORIZATION_FAILED] * 2


def test_confluent_kafka_init_transactions_fails_at_once(broker: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ck-txn", **QUIET})
    started = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(30)
    assert time.monotonic() - started < PROMPTLY_S
    assert raised.value.args[0].fatal(), raised.value


def test_kafka_python_init_transactions_fails_at_once(broker: BrokerProcess) -> None:
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-txn")
    try:
        started = time.monotonic()
        with pytest.raises(kafka.errors.KafkaError):
            producer.init_transactions()
        assert time.monotonic() - started < PROMPTLY_S
    finally:
        producer.close(timeout=5)


def test_aiokafka_start_of_a_transactional_producer_fails_at_once(broker: BrokerProcess) -> None:
    async def start() -> None:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="aio-txn")
        try:
            started = time.monotonic()
            with pytest.raises(aiokafka.errors.KafkaError):
                await producer.start()
            assert time.monotonic() - started < PROMPTLY_S
        finally:
            await producer.stop()

    asyncio.run(start())
