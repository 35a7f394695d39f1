"""read_committed over the wire: Fetch at isolation level 1 reads below the last stable offset (LSO)
and names the aborted transactions in what it returns, ListOffsets answers the LSO for it, and
DescribeProducers lists a partition's producers.

The transactional data is written with the storage layer, so that offsets, interleavings and
open transactions are exactly known (tests/test_transactions.py drives real transactional
producers): into a stopped broker's partition (`PartitionLog`), or on the event loop of a broker
run in this process (`Partition.append_control_marker`, the coordinator's path, with the moment
of the marker chosen). Real clients (confluent-kafka, kafka-python, aiokafka) then read it, with
read_committed and read_uncommitted.
"""

from __future__ import annotations

import asyncio
import datetime
import importlib
import select
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiokafka
import kafka
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import FETCH, LIST_OFFSETS, QUIET, RawConnection, raw_request, wait_until
from kio.schema.describe_producers.v0 import request as describe_producers_v0
from kio.schema.fetch.v12 import request as fetch_v12
from kio.serial import entity_reader

from logbus.broker.broker import Broker
from logbus.cluster.metadata import PartitionState
from logbus.cluster.partition import NotLeaderError, Partition
from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.config import BrokerConfig, log_config
from logbus.protocol import codec
from logbus.protocol.records import TRANSACTIONAL_BIT, build_batch, validate_batches
from logbus.security.listeners import ListenerSettings
from logbus.storage.log import PartitionLog, now_ms
from logbus.testing import BrokerProcess, running_broker, running_cluster

TOPIC = "txns"
DESCRIBE_PRODUCERS = 61
T0 = 1_700_000_000_000  # record timestamps: T0 + 1000 x offset; markers at T0
COORDINATOR_EPOCH = 5
# What `write_transactions` leaves in the partition, by offset:
#   0 p0, 1 p1 (plain) | 2 c0 (producer 1), 3 a0 (producer 2), 4 c1 (1), 5 a1 (2) | 6 ABORT 2, 7 COMMIT 1
#   8 p2 (plain) | 9 o0 (producer 3, left open) | 10 p3 (plain)
COMMITTED = [b"p0", b"p1", b"c0", b"c1", b"p2"]
EVERYTHING = [b"p0", b"p1", b"c0", b"a0", b"c1", b"a1", b"p2", b"o0", b"p3"]
LSO, HW = 9, 11


# ---------------------------------------------------------------------- writing transactions


def plain(log_: PartitionLog, *values: bytes) -> None:
    offset = log_.log_end_offset
    raw = build_batch([(None, value) for value in values], T0 + 1000 * offset)
    log_.append(bytearray(raw), validate_batches(raw), 0)


def transactional(log_: PartitionLog, producer_id: int, sequence: int, value: bytes) -> None:
    raw = build_batch([(None, value)], T0 + 1000 * log_.log_end_offset, producer_id=producer_id,
                      producer_epoch=0, base_sequence=sequence, attributes=TRANSACTIONAL_BIT)
    log_.append(bytearray(raw), validate_batches(raw), 0)


def write_transactions(directory: str) -> None:
    """Append the partition's contents (see the offsets above) to a stopped broker's log."""
    log_ = PartitionLog(directory, TOPIC, 0, log_config(BrokerConfig()), clock=lambda: T0)
    log_.load(0, 0, clean_shutdown=False)
    plain(log_, b"p0")
    plain(log_, b"p1")
    transactional(log_, 1, 0, b"c0")
    transactional(log_, 2, 0, b"a0")
    transactional(log_, 1, 1, b"c1")
    transactional(log_, 2, 1, b"a1")
    log_.append_control_marker(2, 0, False, COORDINATOR_EPOCH, 0)
    log_.append_control_marker(1, 0, True, COORDINATOR_EPOCH, 0)
    plain(log_, b"p2")
    transactional(log_, 3, 0, b"o0")
    plain(log_, b"p3")
    assert (log_.log_end_offset, log_.last_stable_offset(log_.log_end_offset)) == (HW, LSO)
    log_.close_files()


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)


def create_assigned_topic(bootstrap: str, topic: str, replicas: dict[int, list[int]]) -> None:
    """With kafka-python: confluent-kafka 2.16 refuses any replica assignment ("a default
    partition count and a replica assignment are mutually exclusive")."""
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([kafka.admin.NewTopic(topic, -1, -1, replica_assignments=replicas)])
    finally:
        admin.close()


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    """A broker whose topic `txns` holds committed, aborted and open transactions."""
    with running_broker() as started:
        create_topic(started.bootstrap, TOPIC)
        assert started.stop() == 0
        write_transactions(str(Path(started.data_dir) / f"{TOPIC}-0"))
        started.restart()
        yield started


# ---------------------------------------------------------------------- real clients


def read_confluent(bootstrap: str, isolation: str, count: int) -> tuple[list[bytes], Consumer]:
    """`count` values from offset 0; the consumer is returned open (the caller closes it)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rc", "enable.auto.commit": False,
                         "isolation.level": isolation, **QUIET})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None:
            assert message.error() is None, message.error()
            values.append(message.value())
    return values, consumer


def read_kafka_python(bootstrap: str, isolation: str) -> list[bytes]:
    """Everything the consumer gets from offset 0 until it has been idle for 2 s."""
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                   isolation_level=isolation, consumer_timeout_ms=2000)
    partition = kafka.TopicPartition(TOPIC, 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    try:
        return [message.value for message in consumer]
    finally:
        consumer.close()


def read_aiokafka(bootstrap: str, isolation: str) -> list[bytes]:
    """Everything the consumer gets from offset 0 until it has been idle for 2 s."""
    async def run() -> list[bytes]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                             isolation_level=isolation)
        await consumer.start()
        try:
            partition = aiokafka.TopicPartition(TOPIC, 0)
            consumer.assign([partition])
            consumer.seek(partition, 0)
            values: list[bytes] = []
            while batch := await consumer.getmany(partition, timeout_ms=2000):
                values += [message.value for message in batch[partition]]
            return values
        finally:
            await consumer.stop()

    return asyncio.run(run())


def test_confluent_kafka_read_committed_reads_committed_records_and_stops_at_the_lso(broker: BrokerProcess) -> None:
    values, consumer = read_confluent(broker.bootstrap, "read_committed", len(COMMITTED))
    try:
        assert values == COMMITTED
        assert consumer.poll(1.0) is None, "nothing past the open transaction"
        assert consumer.position([TopicPartition(TOPIC, 0)])[0].offset == LSO
    finally:
        consumer.close()


def test_confluent_kafka_read_uncommitted_reads_everything(broker: BrokerProcess) -> None:
    values, consumer = read_confluent(broker.bootstrap, "read_uncommitted", len(EVERYTHING))
    try:
        assert values == EVERYTHING
        assert consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), cached=True)[1] == HW
    finally:
        consumer.close()


@pytest.mark.parametrize("read", [read_kafka_python, read_aiokafka], ids=["kafka-python", "aiokafka"])
def test_python_clients_read_committed_and_uncommitted(broker: BrokerProcess, read: Callable) -> None:
    assert read(broker.bootstrap, "read_committed") == COMMITTED
    assert read(broker.bootstrap, "read_uncommitted") == EVERYTHING


# ---------------------------------------------------------------------- the wire, raw


def fetch_request(offset: int, isolation: int, max_wait_ms: int = 0, topic: str = TOPIC) -> Any:
    partition = codec.make(fetch_v12.FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=offset,
                           last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
    return codec.make(codec.request_class(FETCH, 12), cluster_id=None, replica_id=-1,
                      max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=1 << 20,
                      isolation_level=isolation, session_id=0, session_epoch=-1,
                      topics=(codec.make(fetch_v12.FetchTopic, topic=topic, partitions=(partition,)),),
                      forgotten_topics_data=(), rack_id="")


def fetch(bootstrap: str, offset: int, isolation: int) -> Any:
    with RawConnection(bootstrap) as connection:
        request = fetch_request(offset, isolation)
        response = connection.call_body(FETCH, 12, b"".join(codec.encode(request)))
    return response.responses[0].partitions[0]


def last_offsets(answer: Any) -> list[int]:
    raw = bytes(answer.records or b"")
    return [header.last_offset for header in validate_batches(raw)] if raw else []


def aborted(answer: Any) -> list[tuple[int, int]] | None:
    if answer.aborted_transactions is None:
        return None
    return [(txn.producer_id, txn.first_offset) for txn in answer.aborted_transactions]


def test_fetch_read_committed_stops_at_the_lso_and_names_the_aborted_transactions(broker: BrokerProcess) -> None:
    committed = fetch(broker.bootstrap, 0, isolation=1)
    assert (committed.high_watermark, committed.last_stable_offset) == (HW, LSO)
    assert last_offsets(committed) == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert aborted(committed) == [(2, 3)]
    uncommitted = fetch(broker.bootstrap, 0, isolation=0)
    assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (HW, LSO), "the LSO for every reader"
    assert last_offsets(uncommitted) == list(range(HW))
    assert aborted(uncommitted) is None, "read_uncommitted gets no aborted transactions, as from Kafka"


def test_fetch_read_committed_past_the_aborted_transaction_or_at_the_lso(broker: BrokerProcess) -> None:
    after_abort = fetch(broker.bootstrap, 7, isolation=1)
    assert last_offsets(after_abort) == [7, 8] and aborted(after_abort) == []
    at_lso = fetch(broker.bootstrap, LSO, isolation=1)
    assert last_offsets(at_lso) == [] and aborted(at_lso) == [], "nothing to read: an empty list, as Kafka's"
    assert at_lso.last_stable_offset == LSO


def list_offset(bootstrap: str, timestamp: int, isolation: int, version: int = 7) -> int:
    schema = importlib.import_module(f"kio.schema.list_offsets.v{version}.request")
    partition = codec.make(schema.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1,
                           timestamp=timestamp)
    topic = codec.make(schema.ListOffsetsTopic, name=TOPIC, partitions=(partition,))
    response = raw_request(bootstrap, LIST_OFFSETS, version, replica_id=-1, isolation_level=isolation,
                           topics=(topic,))
    answer = response.topics[0].partitions[0]
    assert answer.error_code == 0
    return answer.offset


def test_list_offsets_bounds_answers_by_the_lso_for_read_committed(broker: BrokerProcess) -> None:
    latest, max_timestamp = -1, -3
    assert list_offset(broker.bootstrap, latest, isolation=1) == LSO
    assert list_offset(broker.bootstrap, latest, isolation=0) == HW
    assert list_offset(broker.bootstrap, latest, isolation=0, version=1) == HW, "v1 has no isolation level"
    assert list_offset(broker.bootstrap, T0 + 8000, isolation=1) == 8
    assert list_offset(broker.bootstrap, T0 + 9000, isolation=1) == -1, "o0, in the open transaction"
    assert list_offset(broker.bootstrap, T0 + 9000, isolation=0) == 9
    assert list_offset(broker.bootstrap, max_timestamp, isolation=1) == -1, "p3 is past the LSO"
    assert list_offset(broker.bootstrap, max_timestamp, isolation=0) == 10


def describe_producers(bootstrap: str, topics: dict[str, list[int]]) -> dict[tuple[str, int], Any]:
    wanted = tuple(describe_producers_v0.TopicRequest(name=name, partition_indexes=tuple(indexes))
                   for name, indexes in topics.items())
    response = raw_request(bootstrap, DESCRIBE_PRODUCERS, 0, topics=wanted)
    return {(topic.name, partition.partition_index): partition
            for topic in response.topics for partition in topic.partitions}


def test_describe_producers_lists_each_producers_state(broker: BrokerProcess) -> None:
    answers = describe_producers(broker.bootstrap, {TOPIC: [0, 7], "no-such-topic": [0], "bad/name": [0]})
    producers = {p.producer_id: (p.producer_epoch, p.last_sequence, p.last_timestamp, p.coordinator_epoch,
                                 p.current_txn_start_offset) for p in answers[(TOPIC, 0)].active_producers}
    assert answers[(TOPIC, 0)].error_code == 0
    assert producers == {
        1: (0, 1, T0, COORDINATOR_EPOCH, -1),  # committed: the last timestamp is its marker's
        2: (0, 1, T0, COORDINATOR_EPOCH, -1),  # aborted
        3: (0, 0, T0 + 9000, -1, 9),  # open since offset 9, no marker yet
    }
    assert answers[(TOPIC, 7)].error_code == 3, "UNKNOWN_TOPIC_OR_PARTITION"
    assert answers[("no-such-topic", 0)].error_code == 3
    assert answers[("bad/name", 0)].error_code == 17, "INVALID_TOPIC_EXCEPTION"


def test_describe_producers_answers_on_a_follower_and_refuses_where_no_replica_is(zookeeper: ZooKeeperServer) -> None:
    """As Kafka's: every replica answers from its own log; a broker holding none of the
    partition answers NOT_LEADER_OR_FOLLOWER (the admin client then asks the leader)."""
    with running_cluster(2, zookeeper=zookeeper) as cluster:
        create_assigned_topic(cluster.bootstrap, "idem", {0: [1, 2]})
        create_assigned_topic(cluster.bootstrap, "solo", {0: [1]})
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, **QUIET})
        for i in range(3):
            producer.produce("idem", value=b"%d" % i, partition=0)
        assert producer.flush(20) == 0
        follower = cluster.brokers[2].bootstrap

        def follower_producers() -> list[Any]:
            return list(describe_producers(follower, {"idem": [0]})[("idem", 0)].active_producers)

        [state] = wait_until(follower_producers, timeout=20, message="the follower's producer state")
        assert (state.producer_epoch, state.last_sequence, state.current_txn_start_offset) == (0, 2, -1)
        assert describe_producers(follower, {"solo": [0]})[("solo", 0)].error_code == 6, "NOT_LEADER_OR_FOLLOWER"
        [on_leader] = describe_producers(cluster.brokers[1].bootstrap, {"idem": [0]})[("idem", 0)].active_producers
        assert on_leader == state


# ---------------------------------------------------------------------- waiting fetches, on a broker in this process


class InProcessBroker:
    """A `Broker` on an event loop of its own thread, so the test can write markers on that loop
    as the transaction coordinator will, while clients talk to it over loopback."""

    def __init__(self, data_dir: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.broker = Broker(BrokerConfig({}), 0, ListenerSettings.plaintext("127.0.0.1", 0), str(data_dir))
        (listener,) = self.call(self.broker.start)
        self.bootstrap = f"{listener.host}:{listener.port}"

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run `function(*args)` on the broker's loop (awaited when it is a coroutine function)."""
        async def run() -> Any:
            result = function(*args)
            return await result if asyncio.iscoroutine(result) else result
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def partition(self, topic: str) -> Partition:
        return wait_until(lambda: self.broker.replicas.get(topic, 0), message=f"{topic}-0 hosted")

    def stop(self) -> None:
        self.call(self.broker.stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def in_process_broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    started = InProcessBroker(tmp_path / "data")
    try:
        yield started
    finally:
        started.stop()


def append(partition: Partition, raw: bytes) -> None:
    data = bytearray(raw)
    partition.append_as_leader(data, validate_batches(data), acks=1)


def answered(connection: RawConnection, within: float) -> bool:
    return bool(select.select([connection.sock], [], [], within)[0])


def read_answer(connection: RawConnection) -> Any:
    frame = connection.read_frame()
    response, _ = entity_reader(codec.response_class(FETCH, 12))(frame, 5)
    return response.responses[0].partitions[0]


def test_a_waiting_read_committed_fetch_answers_when_a_marker_makes_records_stable(
        in_process_broker: InProcessBroker) -> None:
    broker = in_process_broker
    create_topic(broker.bootstrap, "waits")
    partition = broker.partition("waits")
    now = now_ms()  # the marker's time: older records would make it roll a segment of its own (segment.ms)
    txn = build_batch([(None, b"t0"), (None, b"t1")], now, producer_id=7, producer_epoch=0, base_sequence=0,
                      attributes=TRANSACTIONAL_BIT)
    broker.call(append, partition, txn)
    with RawConnection(broker.bootstrap) as connection:
        began = time.monotonic()
        request = fetch_request(0, isolation=1, max_wait_ms=20_000, topic="waits")
        connection.send_frame(connection.header(FETCH, 12) + b"".join(codec.encode(request)))
        assert not answered(connection, 0.3), "nothing is stable yet"
        broker.call(append, partition, build_batch([(None, b"plain")], now))
        assert not answered(connection, 0.3), "the HW moved, the LSO did not: still nothing to read"
        broker.call(partition.append_control_marker, 7, 0, True, 0)
        assert answered(connection, 10), "the commit made the records stable"
        answer = read_answer(connection)
    assert time.monotonic() - began < 15, "answered on the marker, not at max_wait"
    assert (answer.high_watermark, answer.last_stable_offset) == (4, 4)
    assert last_offsets(answer) == [1, 2, 3] and aborted(answer) == []


def test_a_read_committed_confluent_consumer_gets_records_once_their_transaction_commits(
        in_process_broker: InProcessBroker) -> None:
    broker = in_process_broker
    create_topic(broker.bootstrap, "later")
    partition = broker.partition("later")
    for sequence, value in enumerate((b"x", b"y")):
        broker.call(append, partition, build_batch([(None, value)], now_ms(), producer_id=8, producer_epoch=0,
                                                   base_sequence=sequence, attributes=TRANSACTIONAL_BIT))
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "later", "fetch.wait.max.ms": 20_000,
                         "isolation.level": "read_committed", **QUIET})
    consumer.assign([TopicPartition("later", 0, 0)])
    try:
        assert consumer.poll(1.0) is None
        broker.call(partition.append_control_marker, 8, 0, True, 0)
        values = []
        deadline = time.monotonic() + 10
        while len(values) < 2 and time.monotonic() < deadline:
            if (message := consumer.poll(0.2)) is not None:
                values.append(message.value())
        assert values == [b"x", b"y"]
    finally:
        consumer.close()


# ---------------------------------------------------------------------- in process


def partition_over(log_: PartitionLog) -> Partition:
    return Partition("t", 0, "id", 1, log_, PartitionState(1, 1, [1], [1]), log_.log_end_offset)


def open_log(directory: Path, **config: str) -> PartitionLog:
    log_ = PartitionLog(str(directory), "t", 0, log_config(BrokerConfig(), config), clock=lambda: T0)
    log_.load(0, 0, clean_shutdown=False)
    return log_


def test_aborted_transactions_reach_past_the_read_as_kafkas_upper_bound_does(tmp_path: Path) -> None:
    """A read names the transactions aborted from its offset up to the first indexed batch at or
    after its end (every batch is indexed here), one whose marker is in a later segment included;
    not those aborted before it, nor those starting past that bound."""
    log_ = open_log(tmp_path / "t-0", **{"segment.bytes": "400", "index.interval.bytes": "1"})
    transactional(log_, 1, 0, b"a" * 50)  # 0, aborted at 1
    log_.append_control_marker(1, 0, False, 0, 0)
    transactional(log_, 2, 0, b"b" * 50)  # 2, aborted at 5
    plain(log_, b"c" * 150)  # 3
    plain(log_, b"d" * 150)  # 4
    log_.append_control_marker(2, 0, False, 0, 0)  # 5
    transactional(log_, 3, 0, b"e" * 50)  # 6, aborted at 7
    log_.append_control_marker(3, 0, False, 0, 0)  # 7
    assert [segment.base_offset for segment in log_.segments] == [0, 3, 4, 6]
    partition = partition_over(log_)

    def read(offset: int, max_bytes: int = 1 << 20) -> tuple[list[int], list[tuple[int, int]] | None]:
        data = partition.read(offset, max_bytes, read_committed=True)
        return last_offsets_of(data), data.aborted_transactions

    assert read(0, max_bytes=1) == ([0], [(1, 0)]), "the bound is 1 (the next batch): 2 starts past it"
    assert read(0) == ([0, 1, 2], [(1, 0), (2, 2)]), "2's marker is two segments on"
    assert read(3) == ([3], [(2, 2)]), "2 is aborted after 3"
    assert read(6) == ([6, 7], [(3, 6)])
    assert partition.read(0, 1 << 20).aborted_transactions is None, "only read_committed readers get them"


def last_offsets_of(data: Any) -> list[int]:
    raw = data.slice.read()
    return [header.last_offset for header in validate_batches(raw)]


def test_a_marker_appended_through_the_partition_moves_the_lso_and_wakes_fetchers(tmp_path: Path) -> None:
    async def scenario() -> None:
        log_ = open_log(tmp_path / "t-0")
        partition = partition_over(log_)
        transactional(log_, 4, 0, b"v")
        partition.update_state(partition.state)  # the HW follows the log end
        assert (partition.high_watermark, partition.last_stable_offset) == (1, 0)
        arrived = asyncio.get_running_loop().create_future()
        partition.wake_on_data(arrived)
        before = partition.appended_bytes
        info = partition.append_control_marker(4, 0, True, 0)
        assert info.base_offset == 1 and arrived.done()
        assert log_.first_unstable_offset is None, "the HW passed the marker: the log knows at once (the cleaner)"
        assert (partition.high_watermark, partition.last_stable_offset) == (2, 2)
        assert partition.appended_bytes - before == log_.segments[-1].find_position(1).size
        follower = Partition("t", 0, "id", 1, log_, PartitionState(2, 1, [1, 2], [1, 2]), 2)
        with pytest.raises(NotLeaderError):
            follower.append_control_marker(4, 0, False, 0)

    asyncio.run(scenario())
