"""Transaction markers: the partition's marker append, WriteTxnMarkers (key 27) on real brokers,
and the TxnMarkerWriter a transaction coordinator completes transactions with.

The partition is exercised in-process on a real log; the API against broker processes (one
alone, and three in a real ZooKeeper cluster).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import QUIET, raw_request, read_values, wait_until
from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1 import request as markers_v1
from test_cluster import create, partition_state, replicas_identical, segment_digests
from test_storage_unit import make_config

from logbus.broker.broker import Broker
from logbus.cluster.broker_client import BrokerClient
from logbus.cluster.metadata import PartitionState
from logbus.cluster.partition import MARKER_BATCH_BYTES, NotEnoughReplicasError, NotLeaderError, Partition
from logbus.cluster.sasl_login import InterBrokerLogin
from logbus.cluster.txn_markers import write_marker
from logbus.config import BrokerConfig
from logbus.errors import KafkaApiError, code_of_awaited
from logbus.protocol.codec import make, request_class
from logbus.protocol.records import read_end_txn_marker, read_header
from logbus.security.listeners import ListenerSettings
from logbus.security.sasl_client import SaslLogin
from logbus.storage.log import PartitionLog
from logbus.testing import BrokerProcess, running_broker, running_cluster

WRITE_TXN_MARKERS, FIND_COORDINATOR, API_VERSIONS, METADATA = 27, 10, 18, 3


def open_partition(directory: Path, broker_id: int, state: PartitionState, **config: str) -> Partition:
    log_ = PartitionLog(str(directory), "t", 0, make_config(**config))
    log_.load(0, 0, True)
    return Partition("t", 0, "id", broker_id, log_, state, 0)


def last_batch(partition: Partition) -> tuple[object, object]:
    """The header and marker of the partition's last batch."""
    found = partition.log.read(partition.log.log_end_offset - 1, 1 << 20, partition.log.log_end_offset)
    assert found is not None
    raw = bytes(found.read())
    header = read_header(raw)
    return header, read_end_txn_marker(raw, header)


# ---------------------------------------------------------------------------- the partition


def test_a_leader_appends_a_marker_at_its_epoch_and_the_hw_waits_for_the_isr(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = open_partition(tmp_path, 1, PartitionState(1, 4, [1, 2], [1, 2]))
        woken = asyncio.get_running_loop().create_future()
        partition.wake_on_data(woken)
        info = partition.append_control_marker(7, 0, True, 3)
        assert (info.base_offset, partition.log.log_end_offset) == (0, 1)
        assert woken.done(), "followers waiting in a fetch are woken"
        header, marker = last_batch(partition)
        assert header.is_control and header.producer_id == 7 and header.partition_leader_epoch == 4
        assert marker is not None and marker.commit and marker.coordinator_epoch == 3
        assert partition.high_watermark == 0 and partition.replicated(1) is False
        partition.update_follower(2, 1)
        assert partition.high_watermark == 1 and partition.replicated(1) is True

    asyncio.run(scenario())


def test_a_lone_leader_moves_its_hw_past_the_marker_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = open_partition(tmp_path, 1, PartitionState(1, 0, [1], [1]))
        partition.append_control_marker(7, 0, False, 0)
        assert partition.high_watermark == 1 and partition.appended_bytes > 0

    asyncio.run(scenario())


def test_markers_are_refused_by_followers_below_min_isr_and_for_fenced_epochs(tmp_path: Path) -> None:
    async def scenario() -> None:
        follower = open_partition(tmp_path / "f", 2, PartitionState(1, 0, [1, 2], [1, 2]))
        with pytest.raises(NotLeaderError):
            follower.append_control_marker(7, 0, True, 0)
        alone = open_partition(tmp_path / "a", 1, PartitionState(1, 0, [1, 2], [1]), **{"min.insync.replicas": "2"})
        with pytest.raises(NotEnoughReplicasError):
            alone.append_control_marker(7, 0, True, 0)
        leader = open_partition(tmp_path / "l", 1, PartitionState(1, 0, [1], [1]))
        leader.append_control_marker(7, 1, True, 5)
        with pytest.raises(KafkaApiError) as fenced:
            leader.append_control_marker(7, 1, False, 4)
        assert fenced.value.code == ErrorCode.transaction_coordinator_fenced
        with pytest.raises(KafkaApiError) as old:
            leader.append_control_marker(7, 0, False, 5)
        assert old.value.code == ErrorCode.invalid_producer_epoch
        assert [p.log.log_end_offset for p in (follower, alone, leader)] == [0, 0, 1]

    asyncio.run(scenario())


# ---------------------------------------------------------------------------- write_marker


@contextlib.asynccontextmanager
async def broker_in_process(data_dir: Path, broker_id: int = 0, **config: str) -> AsyncIterator[Broker]:
    """A whole broker in this process and event loop (the embedded store unless `zookeeper.connect`)."""
    broker = Broker(BrokerConfig({"group.initial.rebalance.delay.ms": "0", **config}), broker_id,
                    ListenerSettings.plaintext("127.0.0.1", 0), str(data_dir))
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


def test_write_marker_answers_after_the_append_and_then_tells_the_listeners(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_in_process(tmp_path) as broker:
            await broker.metadata.create_topic("t", 1, 1, {"flush.messages": "1"})
            await broker.replicas.wait_opened("t")
            partition = broker.replicas.get("t", 0)
            seen: list[tuple[int, int, bool]] = []
            broker.replicas.add_marker_listener(
                lambda p, producer_id, commit: seen.append((p.log.log_end_offset, producer_id, commit)))

            async def write(topic: str, epoch: int, coordinator_epoch: int, commit: bool) -> ErrorCode:
                return await code_of_awaited(
                    write_marker(broker.replicas, topic, 0, 7, epoch, commit, coordinator_epoch, 5.0))

            assert await write("t", 0, 2, True) == ErrorCode.none
            assert seen == [(1, 7, True)] and partition.high_watermark == 1
            assert partition.log.recovery_point == 1, "flush.messages=1: fsynced before the answer"
            assert await write("t", 0, 1, False) == ErrorCode.transaction_coordinator_fenced
            assert await write("nowhere", 0, 2, False) == ErrorCode.unknown_topic_or_partition
            assert seen == [(1, 7, True)], "a refused marker is not announced"

            def broken(*_args: object) -> None:
                raise RuntimeError("a listener's bug")

            broker.replicas.add_marker_listener(broken)
            assert await write("t", 0, 2, False) == ErrorCode.unknown_server_error
            assert partition.log.log_end_offset == 2 and seen[-1] == (2, 7, False)

    asyncio.run(scenario())


def test_write_marker_is_refused_below_min_insync_replicas(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_in_process(tmp_path) as broker:
            await broker.metadata.create_topic("strict", 1, 1, {"min.insync.replicas": "2"})
            await broker.replicas.wait_opened("strict")
            with pytest.raises(NotEnoughReplicasError):
                await write_marker(broker.replicas, "strict", 0, 7, 0, True, 0, 5.0)
            assert broker.replicas.get("strict", 0).log.log_end_offset == 0

    asyncio.run(scenario())


# ---------------------------------------------------------------------------- WriteTxnMarkers


def write_markers(bootstrap: str, *partitions: tuple[str, int], producer_id: int = 1000, producer_epoch: int = 0,
                  commit: bool = True, coordinator_epoch: int = 3) -> dict[tuple[str, int], ErrorCode]:
    """Send one WriteTxnMarkers v1 request with one marker for `partitions`; each partition's answer."""
    topics: dict[str, list[int]] = {}
    for topic, index in partitions:
        topics.setdefault(topic, []).append(index)
    marker = markers_v1.WritableTxnMarker(
        producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
        coordinator_epoch=coordinator_epoch, topics=tuple(
            markers_v1.WritableTxnMarkerTopic(name=t, partition_indexes=tuple(p)) for t, p in topics.items()))
    response = raw_request(bootstrap, WRITE_TXN_MARKERS, 1, markers=(marker,))
    (result,) = response.markers
    assert result.producer_id == producer_id
    return {(topic.name, p.partition_index): ErrorCode(p.error_code) for topic in result.topics
            for p in topic.partitions}


def end_offset(bootstrap: str, topic: str, index: int = 0) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", **QUIET})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, index), timeout=10)[1]
    finally:
        consumer.close()


def read_everything(bootstrap: str, topic: str, end: int, isolation: str) -> list[bytes]:
    """Every record a confluent-kafka consumer delivers from the start until its position is `end`."""
    return read_values(bootstrap, [(topic, 0)],
                       lambda _, consumer: consumer.position([TopicPartition(topic, 0)])[0].offset >= end, isolation)


@pytest.fixture
def broker() -> Iterator[BrokerProcess]:
    with running_broker() as started:
        admin = AdminClient({"bootstrap.servers": started.bootstrap, **QUIET})
        admin.create_topics([NewTopic("txn", 2, 1)])["txn"].result(15)
        yield started


def test_markers_are_control_batches_that_consumers_skip(broker: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, **QUIET})
    producer.produce("txn", b"plain", partition=0)
    assert producer.flush(15) == 0
    assert write_markers(broker.bootstrap, ("txn", 0)) == {("txn", 0): ErrorCode.none}
    assert end_offset(broker.bootstrap, "txn") == 2
    assert write_markers(broker.bootstrap, ("txn", 0), ("txn", 1), commit=False) == {
        ("txn", 0): ErrorCode.none, ("txn", 1): ErrorCode.none}
    assert (end_offset(broker.bootstrap, "txn"), end_offset(broker.bootstrap, "txn", 1)) == (3, 1)
    for isolation in ("read_uncommitted", "read_committed"):
        assert read_everything(broker.bootstrap, "txn", 3, isolation) == [b"plain"]


def test_fenced_epochs_and_unknown_partitions_are_refused(broker: BrokerProcess) -> None:
    assert write_markers(broker.bootstrap, ("txn", 0), producer_epoch=2, coordinator_epoch=5) == {
        ("txn", 0): ErrorCode.none}
    assert write_markers(broker.bootstrap, ("txn", 0), producer_epoch=2, coordinator_epoch=4) == {
        ("txn", 0): ErrorCode.transaction_coordinator_fenced}
    assert write_markers(broker.bootstrap, ("txn", 0), producer_epoch=1, coordinator_epoch=5) == {
        ("txn", 0): ErrorCode.invalid_producer_epoch}
    assert write_markers(broker.bootstrap, ("nowhere", 0), ("txn", 9), ("txn", 1)) == {
        ("nowhere", 0): ErrorCode.unknown_topic_or_partition, ("txn", 9): ErrorCode.unknown_topic_or_partition,
        ("txn", 1): ErrorCode.none}
    assert end_offset(broker.bootstrap, "txn") == 1, "only the first marker was written"


def test_markers_may_land_on_the_internal_offsets_topic(broker: BrokerProcess) -> None:
    raw_request(broker.bootstrap, FIND_COORDINATOR, 1, key="g", key_type=0)  # creates __consumer_offsets
    wait_until(lambda: end_offset(broker.bootstrap, "__consumer_offsets") == 0, message="__consumer_offsets")
    assert write_markers(broker.bootstrap, ("__consumer_offsets", 0)) == {("__consumer_offsets", 0): ErrorCode.none}
    assert end_offset(broker.bootstrap, "__consumer_offsets") == 1


def test_in_a_cluster_the_leader_answers_once_every_replica_has_the_marker(zookeeper: Any) -> None:
    with running_cluster(3, zookeeper=zookeeper) as cluster:
        create(cluster, "rf3")
        leader = wait_until(lambda: (state := partition_state(cluster, "rf3"))[0] > 0 and len(state[2]) == 3
                            and state[0], message="a leader and all three in the ISR")
        follower, other = (b for b in cluster.brokers if b != leader)
        leader_bootstrap = cluster.brokers[leader].bootstrap
        assert write_markers(cluster.brokers[follower].bootstrap, ("rf3", 0)) == {
            ("rf3", 0): ErrorCode.not_leader_or_follower}
        before = segment_digests(cluster, "rf3")[leader]
        paused = cluster.brokers[follower].process
        paused.send_signal(signal.SIGSTOP)  # briefly: far less than replica.lag.time.max.ms
        try:
            with ThreadPoolExecutor(1) as pool:
                answer = pool.submit(write_markers, leader_bootstrap, ("rf3", 0))
                wait_until(lambda: segment_digests(cluster, "rf3")[leader] != before, message="the leader appended")
                assert not answer.done(), "answered before a paused ISR member has the marker"
                paused.send_signal(signal.SIGCONT)
                assert answer.result(timeout=30) == {("rf3", 0): ErrorCode.none}
        finally:
            paused.send_signal(signal.SIGCONT)
        assert replicas_identical(cluster, "rf3"), "every replica has the marker once it is answered"
        assert end_offset(cluster.bootstrap, "rf3") == 1
        assert other in partition_state(cluster, "rf3")[2]


# ---------------------------------------------------------------------------- BrokerClient


def api_versions_request() -> Any:
    return make(request_class(API_VERSIONS, 3), client_software_name="logbus-test", client_software_version="1")


def test_a_broker_client_pipelines_requests_and_reconnects_after_the_peer_closes(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_in_process(tmp_path) as broker:
            await broker.metadata.create_topic("t", 3, 1, {})
            client = BrokerClient(("127.0.0.1", broker.listeners[0].port), "logbus-test", 10.0)
            metadata = make(request_class(METADATA, 12), topics=None, allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False)
            versions = [client.request(API_VERSIONS, 3, api_versions_request()) for _ in range(20)]
            answers = await asyncio.gather(*versions, client.request(METADATA, 12, metadata))
            assert all(WRITE_TXN_MARKERS in {k.api_key for k in a.api_keys} for a in answers[:-1])
            assert [t.name for t in answers[-1].topics] == ["t"]
            broker.connections.close_all()
            with contextlib.suppress(ConnectionError):  # sent before the client saw the close, or not
                await client.request(API_VERSIONS, 3, api_versions_request())
            assert (await client.request(API_VERSIONS, 3, api_versions_request())).error_code == ErrorCode.none
            client.close()
            with pytest.raises(ConnectionError):
                await client.request(API_VERSIONS, 3, api_versions_request())

    asyncio.run(scenario())


@contextlib.asynccontextmanager
async def hostile_peer(answer: bytes | None, received: asyncio.Event | None = None) -> AsyncIterator[tuple[str, int]]:
    """A server that reads a request (then sets `received`), answers `answer` and closes (None: stays
    silent), on a free port."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(int.from_bytes(await reader.readexactly(4), "big"))
        if received is not None:
            received.set()
        if answer is None:
            await reader.read()  # until the client closes
        else:
            writer.write(answer)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[:2]
    finally:
        server.close()


@pytest.mark.parametrize(("answer", "refusal"), [
    ((2**31 - 1).to_bytes(4, "big"), "response frame of 2147483647 bytes"),  # refused before it is read
    ((7).to_bytes(4, "big") + (1).to_bytes(4, "big") + b"\xff\xff\xff", "malformed ApiVersionsResponse"),
    ((4).to_bytes(4, "big") + (99).to_bytes(4, "big"), "a response to no request"),
    (b"\x00\x00", "connection closed"),  # the peer closes mid-frame
], ids=["oversized", "malformed", "unexpected", "truncated"])
def test_a_broker_client_drops_a_connection_that_answers_wrongly(answer: bytes, refusal: str) -> None:
    async def scenario() -> None:
        async with hostile_peer(answer) as address:
            client = BrokerClient(address, "logbus-test", 10.0, max_response_bytes=1 << 20)
            with pytest.raises(ConnectionError, match=refusal):
                await client.request(API_VERSIONS, 3, api_versions_request())
            client.close()

    asyncio.run(scenario())


def test_a_sasl_login_refuses_an_answer_larger_than_a_token_before_reading_it() -> None:
    """During the login the bound is the SASL one (64 KB), not the connection's larger one."""
    async def scenario() -> None:
        async with hostile_peer((1 << 20).to_bytes(4, "big")) as address:
            client = BrokerClient(address, "logbus-test", 10.0, max_response_bytes=4 << 20,
                                  sasl=InterBrokerLogin(SaslLogin("PLAIN", "broker", "secret")))
            with pytest.raises(ConnectionError, match="response frame of 1048576 bytes \\(at most 65536 taken\\)"):
                await client.request(API_VERSIONS, 3, api_versions_request())
            client.close()

    asyncio.run(scenario())


def test_a_broker_client_gives_up_on_a_silent_peer_after_its_timeout_or_when_closed() -> None:
    async def scenario() -> None:
        received = asyncio.Event()
        async with hostile_peer(None, received) as address:
            client = BrokerClient(address, "logbus-test", 0.2)
            began = asyncio.get_running_loop().time()
            with pytest.raises(TimeoutError):
                await client.request(API_VERSIONS, 3, api_versions_request())
            assert asyncio.get_running_loop().time() - began < 5
            received.clear()
            client.timeout = 30.0
            waiting = asyncio.ensure_future(client.request(API_VERSIONS, 3, api_versions_request()))
            await received.wait()
            client.close()
            with pytest.raises(ConnectionError, match="closed"):
                await waiting

    asyncio.run(scenario())


# ---------------------------------------------------------------------------- TxnMarkerWriter


async def logged(caplog: pytest.LogCaptureFixture, text: str, timeout: float = 10.0) -> None:
    """Wait (on the event loop) until a log record contains `text`."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not any(text in record.getMessage() for record in caplog.records):
        assert asyncio.get_running_loop().time() < deadline, f"no log record with {text!r}"
        await asyncio.sleep(0.02)


def test_the_writer_retries_until_a_final_code_and_stop_cancels_it(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="logbus.cluster.txn_markers")

    async def scenario() -> None:
        async with broker_in_process(tmp_path) as broker:
            await broker.metadata.create_topic("t", 2, 1, {})
            await broker.metadata.create_topic("strict", 2, 1, {"min.insync.replicas": "2"})
            await broker.replicas.wait_opened("t")
            await broker.replicas.wait_opened("strict")
            writer = broker.txn_markers
            wanted = [("t", 0), ("t", 1), ("gone", 0), ("t", 5)]
            assert await writer.write(7, 0, 3, True, wanted) == {
                ("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none,
                ("gone", 0): ErrorCode.unknown_topic_or_partition, ("t", 5): ErrorCode.unknown_topic_or_partition}
            fenced = await writer.write(7, 0, 2, False, [("t", 0)])
            assert fenced == {("t", 0): ErrorCode.transaction_coordinator_fenced}

            pending = asyncio.ensure_future(writer.write(7, 0, 3, True, [("strict", 0), ("t", 0)]))
            await logged(caplog, "retrying {('strict', 0): 'not_enough_replicas'}")
            await broker.metadata.set_topic_configs("strict", {"min.insync.replicas": "1"})
            assert await pending == {("strict", 0): ErrorCode.none, ("t", 0): ErrorCode.none}

            await broker.metadata.set_topic_configs("strict", {"min.insync.replicas": "2"})
            caplog.clear()
            stuck = asyncio.ensure_future(writer.write(8, 0, 0, True, [("strict", 1)]))
            await logged(caplog, "retrying {('strict', 1): 'not_enough_replicas'}")
            await writer.stop()
            with pytest.raises(asyncio.CancelledError):
                await stuck
            assert broker.replicas.get("strict", 1).log.log_end_offset == 0

    asyncio.run(scenario())


def log_sizes(cluster: Any, topic: str, index: int) -> dict[int, int]:
    """Per broker holding the partition, the size of its first segment."""
    sizes = {}
    for broker_id, broker in cluster.brokers.items():
        path = os.path.join(broker.data_dir, f"{topic}-{index}", "00000000000000000000.log")
        if os.path.exists(path):
            sizes[broker_id] = os.path.getsize(path)
    return sizes


def test_the_writer_reaches_leaders_on_other_brokers_and_follows_a_new_leader(zookeeper: Any,
                                                                                tmp_path: Path) -> None:
    """Brokers 1-3 are processes; broker 4, whose writer is under test, runs in this process."""
    with running_cluster(3, zookeeper=zookeeper) as cluster:
        async def scenario() -> None:
            async with broker_in_process(tmp_path, 4, **cluster.config) as local:
                await local.metadata.create_topic("spread", 3, 3, {}, assignments=[[1, 2, 3], [2, 3, 1], [3, 1, 2]])
                keys = [("spread", i) for i in range(3)]
                assert await local.txn_markers.write(7, 0, 1, True, keys) == dict.fromkeys(keys, ErrorCode.none)
                for i in range(3):
                    assert log_sizes(cluster, "spread", i) == dict.fromkeys((1, 2, 3), MARKER_BATCH_BYTES)
                assert await local.txn_markers.write(7, 0, 0, False, keys[:1]) == {
                    keys[0]: ErrorCode.transaction_coordinator_fenced}

                cluster.brokers[1].kill()  # the leader of spread-0: unreachable until a new leader is elected
                assert await local.txn_markers.write(7, 0, 1, False, keys) == dict.fromkeys(keys, ErrorCode.none)
                assert local.metadata.topic("spread").partitions[0].leader in (2, 3)
                for i in range(3):
                    sizes = log_sizes(cluster, "spread", i)
                    assert sizes[2] == sizes[3] == 2 * MARKER_BATCH_BYTES

        asyncio.run(scenario())
