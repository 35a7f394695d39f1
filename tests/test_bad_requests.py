"""Bad input against a real broker: each gets its Kafka error code or a clean close of that one
connection, while a client connected at the same time keeps being served and nothing it had
acknowledged is lost."""

from __future__ import annotations

import datetime
import itertools
import os
import struct
import time
import uuid
from collections.abc import Iterator

import crc32c
import pytest
from helpers import (
    API_VERSIONS_KEY,
    CREATE_TOPICS,
    FETCH,
    METADATA,
    RawConnection,
    ballast,
    consume_partition,
    raw_produce,
    raw_request,
    wait_until,
)
from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.fetch.v4 import request as fetch_v4
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.metadata.v11 import request as metadata_v11
from kio.schema.metadata.v12 import request as metadata_v12
from test_decode_bounds import NULL_ARRAY_REQUESTS, SERVED, killer_frames

from bench.fuzz.samples import request_frame
from logbus.protocol.records import build_batch
from logbus.testing import BrokerProcess, running_broker

REQUEST_MAX_BYTES = 256 * 1024
MESSAGE_MAX_BYTES = 64 * 1024
BROKER_CONFIG = {
    "auto.create.topics.enable": "false",
    "socket.request.max.bytes": str(REQUEST_MAX_BYTES),
    "message.max.bytes": str(MESSAGE_MAX_BYTES),
}
NONE, OFFSET_OUT_OF_RANGE, CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION = 0, 1, 2, 3
MESSAGE_TOO_LARGE, COORDINATOR_NOT_AVAILABLE, INVALID_TOPIC_EXCEPTION, UNSUPPORTED_VERSION = 10, 15, 17, 35
KAFKA_STORAGE_ERROR, INVALID_REQUEST = 56, 42
FIND_COORDINATOR = 10
INVALID_TOPIC_NAMES = ["has space", "slash/topic", ".", "..", "x" * 250, "ümlaut"]
_topic_numbers = itertools.count()


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker(config=BROKER_CONFIG) as started:
        yield started


def new_topic(bootstrap: str, prefix: str = "bad", **configs: str) -> str:
    """Create a topic of one partition over a raw CreateTopics (auto-create is off here)."""
    name = f"{prefix}-{next(_topic_numbers)}-{os.getpid()}"
    assert create_topics(bootstrap, name, **configs) == NONE
    return name


def create_topics(bootstrap: str, name: str, **configs: str) -> int:
    schema = create_topics_v7
    topic = schema.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, assignments=(),
        configs=tuple(schema.CreatableTopicConfig(name=key, value=value) for key, value in configs.items()),
    )
    response = raw_request(bootstrap, CREATE_TOPICS, 7, topics=(topic,),
                           timeout=datetime.timedelta(seconds=10), validate_only=False)
    return int(response.topics[0].error_code)


def batch(*values: bytes) -> bytes:
    return build_batch([(None, value) for value in values], int(time.time() * 1000))


class Bystander:
    """A client connected before the bad input arrives, with records already acknowledged."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.topic = new_topic(broker.bootstrap, "bystander")
        self.connection = RawConnection(broker.bootstrap)
        self.values = [b"acknowledged-before"]
        assert raw_produce(self.connection, self.topic, batch(*self.values)) == (NONE, 0)

    def assert_still_served(self) -> None:
        """Its open connection still produces, and everything acknowledged reads back in order."""
        self.values.append(b"acknowledged-after")
        assert raw_produce(self.connection, self.topic, batch(self.values[-1])) == (NONE, 1)
        read = consume_partition(self.broker.bootstrap, self.topic, 0, len(self.values))
        assert [message.value() for message in read] == self.values


@pytest.fixture
def bystander(broker: BrokerProcess) -> Iterator[Bystander]:
    other = Bystander(broker)
    yield other
    other.connection.sock.close()


def assert_closed_alone(broker: BrokerProcess, payload: bytes, bystander: Bystander) -> None:
    """`payload` sent as-is on a new connection gets that connection closed; the bystander goes on."""
    with RawConnection(broker.bootstrap) as bad:
        bad.sock.sendall(payload)
        assert bad.closed_by_broker(), "the broker kept a connection that sent bad input"
    assert broker.running
    bystander.assert_still_served()


# ------------------------------------------------------------------------ framing


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize("payload", [
    framed(os.urandom(64)),
    framed(b"\x00\x03"),  # a header cut after the API key
    framed(struct.pack(">hhi", METADATA, 12, 1) + b"\x00\x05ab"),  # client id longer than the frame
    framed(struct.pack(">hhih", METADATA, 12, 1, -1) + b"\x00\xff\xff\xff"),  # body that does not decode
    struct.pack(">i", -5) + b"abcde",
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # a length far over socket.request.max.bytes
], ids=["garbage", "truncated-header", "client-id-past-the-end", "undecodable-body", "negative-length", "http"])
def test_malformed_frames_close_only_their_connection(broker: BrokerProcess, bystander: Bystander,
                                                      payload: bytes) -> None:
    assert_closed_alone(broker, payload, bystander)


def test_frame_over_socket_request_max_bytes_is_refused_before_its_body(broker: BrokerProcess,
                                                                        bystander: Bystander) -> None:
    assert_closed_alone(broker, struct.pack(">i", REQUEST_MAX_BYTES + 1), bystander)


def test_frame_just_under_the_limit_is_served(broker: BrokerProcess, bystander: Bystander) -> None:
    """The limit is where it is configured: a big produce under it gets an answer, not a close."""
    topic = new_topic(broker.bootstrap, "big", **{"max.message.bytes": str(REQUEST_MAX_BYTES)})
    with RawConnection(broker.bootstrap) as connection:
        assert raw_produce(connection, topic, batch(b"v" * (REQUEST_MAX_BYTES - 1024))) == (NONE, 0)
    bystander.assert_still_served()


# ------------------------------------------------------------------------ API keys and versions


def test_unknown_api_key_closes_the_connection(broker: BrokerProcess, bystander: Bystander) -> None:
    header = struct.pack(">hhih", 999, 0, 1, 3) + b"raw"
    assert_closed_alone(broker, framed(header), bystander)


def test_api_versions_at_an_unsupported_version_answers_v0_with_the_api_list(
        broker: BrokerProcess, bystander: Bystander) -> None:
    with RawConnection(broker.bootstrap) as connection:
        connection.send_frame(struct.pack(">hhih", API_VERSIONS_KEY, 99, 42, 3) + b"raw" + b"\x00" * 8)
        response = connection.read_frame()
        correlation, error, count = struct.unpack_from(">ihi", response)
        assert (correlation, error) == (42, UNSUPPORTED_VERSION)
        keys = [struct.unpack_from(">hhh", response, 10 + 6 * index) for index in range(count)]
        assert (API_VERSIONS_KEY, 0, 4) in keys and any(key == 0 for key, _, _ in keys)
        assert len(response) == 10 + 6 * count  # v0: no throttle time, no tags
        versions = connection.call(API_VERSIONS_KEY, 0)  # the retry at v0 on the same connection
        assert versions.error_code == NONE
    bystander.assert_still_served()


def test_other_api_at_an_unsupported_version_closes_the_connection(broker: BrokerProcess,
                                                                   bystander: Bystander) -> None:
    header = struct.pack(">hhih", METADATA, 99, 1, 3) + b"raw"
    assert_closed_alone(broker, framed(header + b"\x00" * 16), bystander)


# ------------------------------------------------------------------------ produce


def test_bad_crc_is_corrupt_message_and_nothing_is_stored(broker: BrokerProcess, bystander: Bystander) -> None:
    topic = new_topic(broker.bootstrap)
    damaged = bytearray(batch(b"one", b"two"))
    damaged[-3] ^= 0xFF  # a byte of the last record; the CRC no longer matches
    with RawConnection(broker.bootstrap) as connection:
        assert raw_produce(connection, topic, bytes(damaged))[0] == CORRUPT_MESSAGE
        assert raw_produce(connection, topic, batch(b"good")) == (NONE, 0), "the bad batch took no offset"
    assert crc32c.crc32c(bytes(damaged[21:])) != struct.unpack_from(">I", damaged, 17)[0]
    assert [m.value() for m in consume_partition(broker.bootstrap, topic, 0, 1)] == [b"good"]
    bystander.assert_still_served()


@pytest.mark.parametrize("topic_limit", [None, 2048], ids=["message.max.bytes", "topic-max.message.bytes"])
def test_batch_over_the_size_limit_is_message_too_large(broker: BrokerProcess, bystander: Bystander,
                                                        topic_limit: int | None) -> None:
    configs = {} if topic_limit is None else {"max.message.bytes": str(topic_limit)}
    topic = new_topic(broker.bootstrap, **configs)
    limit = topic_limit or MESSAGE_MAX_BYTES
    with RawConnection(broker.bootstrap) as connection:
        assert raw_produce(connection, topic, batch(b"x" * (limit + 1)))[0] == MESSAGE_TOO_LARGE
        assert raw_produce(connection, topic, batch(b"x" * (limit - 200))) == (NONE, 0)
    bystander.assert_still_served()


# ------------------------------------------------------------------------ topic names


def metadata_error(bootstrap: str, name: str) -> int:
    topics = (metadata_v12.MetadataRequestTopic(topic_id=None, name=name),)
    response = raw_request(bootstrap, METADATA, 12, topics=topics, allow_auto_topic_creation=True,
                           include_topic_authorized_operations=False)
    return int(response.topics[0].error_code)


@pytest.mark.parametrize("name", INVALID_TOPIC_NAMES)
def test_invalid_topic_names_are_invalid_topic_exception(broker: BrokerProcess, bystander: Bystander,
                                                         name: str) -> None:
    assert metadata_error(broker.bootstrap, name) == INVALID_TOPIC_EXCEPTION
    assert create_topics(broker.bootstrap, name) == INVALID_TOPIC_EXCEPTION
    with RawConnection(broker.bootstrap) as connection:
        assert raw_produce(connection, name, batch(b"x"))[0] == INVALID_TOPIC_EXCEPTION
    bystander.assert_still_served()


def test_unknown_topic_with_auto_create_off(broker: BrokerProcess, bystander: Bystander) -> None:
    name = f"never-created-{os.getpid()}"
    assert metadata_error(broker.bootstrap, name) == UNKNOWN_TOPIC_OR_PARTITION
    with RawConnection(broker.bootstrap) as connection:
        assert raw_produce(connection, name, batch(b"x"))[0] == UNKNOWN_TOPIC_OR_PARTITION
    assert metadata_error(broker.bootstrap, name) == UNKNOWN_TOPIC_OR_PARTITION, "produce created nothing"
    bystander.assert_still_served()


# ------------------------------------------------------------------------ fetch


def fetch_error(bootstrap: str, topic: str, offset: int) -> int:
    schema = fetch_v12
    partition = schema.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=offset,
                                      last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=65536)
    response = raw_request(
        bootstrap, FETCH, 12, cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=10),
        min_bytes=1, max_bytes=65536, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(schema.FetchTopic(topic=topic, partitions=(partition,)),), forgotten_topics_data=(), rack_id="",
    )
    return int(response.responses[0].partitions[0].error_code)


@pytest.mark.parametrize("offset", [3, 1000, -7], ids=["one-past-the-end", "far-past-the-end", "negative"])
def test_fetch_out_of_range(broker: BrokerProcess, bystander: Bystander, offset: int) -> None:
    topic = new_topic(broker.bootstrap)
    with RawConnection(broker.bootstrap) as connection:
        assert raw_produce(connection, topic, batch(b"a", b"b")) == (NONE, 0)
    assert fetch_error(broker.bootstrap, topic, 2) == NONE, "the log end offset itself is in range"
    assert fetch_error(broker.bootstrap, topic, offset) == OFFSET_OUT_OF_RANGE
    bystander.assert_still_served()


# ------------------------------------------------------------------------ full disk


def test_full_disk_is_kafka_storage_error_and_the_broker_keeps_serving(small_disk: str) -> None:
    """The append that finds the disk full takes the (only) log dir offline (KIP-112): its
    partitions answer KAFKA_STORAGE_ERROR, even once space returns, while the broker stays up and
    answers everything else; a restart brings back every acknowledged record."""
    with running_broker(config=BROKER_CONFIG, data_dir=os.path.join(small_disk, "data")) as broker:
        reader = Bystander(broker)
        topic = new_topic(broker.bootstrap, "full")
        weight = ballast(small_disk, 300_000)
        acknowledged: list[bytes] = []
        with RawConnection(broker.bootstrap) as producer:
            def storage_error() -> bool:
                value = f"{len(acknowledged):06d}".encode() + b"x" * 40_000
                error, offset = raw_produce(producer, topic, batch(value))
                if error == NONE:
                    assert offset == len(acknowledged)
                    acknowledged.append(value)
                    return False
                assert error == KAFKA_STORAGE_ERROR, error
                return True
            wait_until(storage_error, timeout=30, interval=0, message="KAFKA_STORAGE_ERROR on a full disk")
            assert acknowledged, "some records fit before the disk filled"
            not_a_byte = ballast(small_disk, 0, "more-ballast")
            group_topic = producer.call(FIND_COORDINATOR, 3, key="full-disk-group", key_type=0)
            assert group_topic.error_code == COORDINATOR_NOT_AVAILABLE, "__consumer_offsets cannot be created"
            assert raw_produce(producer, topic, batch(b"x" * 40_000)) == (KAFKA_STORAGE_ERROR, -1), "still served"
            assert raw_produce(reader.connection, reader.topic, batch(b"y")) == (KAFKA_STORAGE_ERROR, -1), \
                "the whole log dir is offline"
            assert fetch_error(broker.bootstrap, topic, 0) == KAFKA_STORAGE_ERROR
            assert create_topics(broker.bootstrap, f"{topic}-later") == KAFKA_STORAGE_ERROR, "metadata not written"

            os.unlink(weight)
            os.unlink(not_a_byte)
            assert raw_produce(producer, topic, batch(b"after")) == (KAFKA_STORAGE_ERROR, -1), "until a restart"
            assert create_topics(broker.bootstrap, f"{topic}-later") == NONE, "the failed creation left nothing"
        reader.connection.sock.close()
        assert broker.running
        assert broker.stop() == 0
        broker.restart()
        read = consume_partition(broker.bootstrap, topic, 0, len(acknowledged))
        assert [message.value() for message in read] == acknowledged
        reader.connection = RawConnection(broker.bootstrap)
        reader.assert_still_served()
        reader.connection.sock.close()


def test_partition_past_the_topics_count_is_unknown(broker: BrokerProcess, bystander: Bystander) -> None:
    topic = new_topic(broker.bootstrap)
    with RawConnection(broker.bootstrap) as connection:
        assert raw_produce(connection, topic, batch(b"x"), partition=5)[0] == UNKNOWN_TOPIC_OR_PARTITION
        assert raw_produce(connection, topic, batch(b"x"), partition=-1)[0] == UNKNOWN_TOPIC_OR_PARTITION
    assert fetch_error(broker.bootstrap, f"never-created-{os.getpid()}", 0) == UNKNOWN_TOPIC_OR_PARTITION
    bystander.assert_still_served()


# ------------------------------------------------------------------------ counts larger than the frame


def test_huge_counts_of_every_served_api_version_close_only_their_connection(broker: BrokerProcess,
                                                                              bystander: Bystander) -> None:
    """An array count of 2^32 in an 18-byte request aborted the process in kio's decoder (issue 11 item 1)."""
    for api_key, version in SERVED:
        for frame in killer_frames(api_key, version):
            with RawConnection(broker.bootstrap) as bad:
                bad.send_frame(frame)
                bad.closed_by_broker(timeout=5)  # refused: closed; a valid alignment: answered
            assert broker.running, f"broker died on api {api_key} v{version}: {frame.hex()}"
    bystander.assert_still_served()
    assert "Traceback" not in broker.read_log()


def test_fetch_v4_to_v8_reads_an_existing_partition(broker: BrokerProcess, bystander: Bystander) -> None:
    """Found by the end-to-end fuzz target: versions before v9 carry no current_leader_epoch."""
    partition = fetch_v4.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=65536)
    response = raw_request(
        broker.bootstrap, FETCH, 4, replica_id=-1, max_wait=datetime.timedelta(milliseconds=10), min_bytes=1,
        max_bytes=65536, isolation_level=0,
        topics=(fetch_v4.FetchTopic(topic=bystander.topic, partitions=(partition,)),),
    )
    assert int(response.responses[0].partitions[0].error_code) == NONE
    assert response.responses[0].partitions[0].records


def test_metadata_by_topic_id_before_v12_is_invalid_request(broker: BrokerProcess, bystander: Bystander) -> None:
    """Found by the end-to-end fuzz target: the v10-v11 response cannot carry a null name (Kafka:
    "Topic IDs are not supported in requests for version 11")."""
    topic = metadata_v11.MetadataRequestTopic(topic_id=uuid.uuid4(), name=None)
    response = raw_request(broker.bootstrap, METADATA, 11, topics=(topic,), allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)
    assert int(response.topics[0].error_code) == INVALID_REQUEST
    bystander.assert_still_served()


@pytest.mark.parametrize("case", ["produce-v9-topic_data", "offset_fetch-v8-groups", "list_offsets-v6-topics"])
def test_null_in_a_non_nullable_array_closes_only_its_connection(broker: BrokerProcess, bystander: Bystander,
                                                                 case: str) -> None:
    """These reached the handlers and logged tracebacks (issue 11 item 7); Kafka's parser refuses them."""
    api_key, version, _name, body = NULL_ARRAY_REQUESTS[case]
    assert_closed_alone(broker, framed(request_frame(api_key, version, body)), bystander)
    assert "Traceback" not in broker.read_log()
