"""A record makes a round trip through confluent-kafka (start time is measured in bench/broker_bench.py)."""

from confluent_kafka import Consumer, Producer, TopicPartition

from logbus.testing import BrokerProcess


def test_round_trip(logbus_broker: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": logbus_broker.bootstrap})
    producer.produce("smoke", key=b"k", value=b"v", headers=[("h", b"1")])
    assert producer.flush(10) == 0
    consumer = Consumer(
        {"bootstrap.servers": logbus_broker.bootstrap, "group.id": "smoke", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition("smoke", 0, 0)])
    message = None
    for _ in range(50):
        message = consumer.poll(0.2)
        if message is not None:
            break
    consumer.close()
    assert message is not None and message.error() is None
    assert (message.key(), message.value(), message.headers(), message.offset()) == (
        b"k", b"v", [("h", b"1")], 0
    )
