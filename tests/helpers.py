"""Test helpers shared by the suite: polling with a deadline, and reading a topic back."""

from __future__ import annotations

import contextlib
import datetime
import errno
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as produce_v9
from kio.serial import entity_reader

from logbus.protocol import codec
from logbus.testing import BrokerProcess, running_broker

T = TypeVar("T")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)  # bench.fuzz.samples: well-formed frames of every served API version

QUIET = {"log_level": 0}  # librdkafka logs every reconnect to stderr otherwise


def zookeeper_chroot(connect_string: str, name: str) -> str:
    """`connect_string` with a fresh chroot (`/name-<uuid>`), created: a test's own corner of the
    session's ZooKeeper (conftest's `zookeeper`), as each cluster has one, instead of a ZooKeeper
    process of its own."""
    from kazoo.client import KazooClient

    chroot = f"/{name}-{uuid.uuid4().hex}"
    setup = KazooClient(hosts=connect_string)
    setup.start(30)
    try:
        setup.ensure_path(chroot)
    finally:
        setup.stop()
        setup.close()
    return connect_string + chroot


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


API_VERSIONS_KEY = 18


class RawConnection:
    """One loopback socket speaking the Kafka framing by hand, for requests real clients never send.

    `call` exchanges a kio-built request and decodes the response; `send_frame`/`read_frame` move raw
    bytes; `closed_by_broker` tells a clean close apart from a connection that is still served.
    """

    def __init__(self, bootstrap: str, timeout: float = 15.0, source: str | None = None) -> None:
        """`source`: the local address to connect from (e.g. 127.0.0.2, loopback too)."""
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout,
                                             source_address=None if source is None else (source, 0))
        self.correlation = 0

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.sock.close()

    def header(self, api_key: int, version: int, client_id: bytes = b"raw-test") -> bytes:
        """A request header (v1, or v2 with an empty tag section for flexible versions)."""
        self.correlation += 1
        header = struct.pack(">hhih", api_key, version, self.correlation, len(client_id)) + client_id
        return header + (b"\x00" if codec.is_flexible(api_key, version) else b"")

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def read_frame(self) -> bytes:
        return self._exactly(struct.unpack(">i", self._exactly(4))[0])

    def call_body(self, api_key: int, version: int, body: bytes) -> Any:
        """Send an encoded request body; decode the response (checking its correlation id)."""
        self.send_frame(self.header(api_key, version) + body)
        response = self.read_frame()
        assert struct.unpack_from(">i", response)[0] == self.correlation
        flexible = codec.is_flexible(api_key, version) and api_key != API_VERSIONS_KEY
        value, used = entity_reader(codec.response_class(api_key, version))(response, 5 if flexible else 4)
        assert (5 if flexible else 4) + used == len(response), "trailing bytes in the response"
        return value

    def call(self, api_key: int, version: int, **fields: Any) -> Any:
        """A kio request built from `fields`; returns the decoded response."""
        request = codec.make(codec.request_class(api_key, version), **fields)
        return self.call_body(api_key, version, b"".join(codec.encode(request)))

    def closed_by_broker(self, timeout: float = 10.0) -> bool:
        """True once the broker closes its end (EOF or reset) within `timeout`; False if it stays silent."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def _exactly(self, count: int) -> bytes:
        data = bytearray()
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            assert chunk, "broker closed the connection"
            data += chunk
        return bytes(data)


def unique(prefix: str) -> str:
    """A name no other test of a shared broker uses (topics, groups, members)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, partitions: int) -> str:
    """A new topic by a unique name, of `partitions` partitions with one replica each."""
    name = unique("topic")
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
    return name


def join_when_loaded(connection: RawConnection, heartbeat_api: int, group: str, member: str, topic: str,
                     **fields: Any) -> Any:
    """A member's joining heartbeat (ConsumerGroupHeartbeat or ShareGroupHeartbeat: `heartbeat_api`,
    with `fields` besides), answered once the broker serves the group (a fresh broker creates and
    loads __consumer_offsets first)."""
    def joined() -> Any:
        connection.call(10, 3, key=group, key_type=0)  # FindCoordinator creates __consumer_offsets
        reply = connection.call(heartbeat_api, 1, group_id=group, member_id=member, member_epoch=0,
                                subscribed_topic_names=(topic,), **fields)
        return reply if reply.error_code == ErrorCode.none else None
    return wait_until(joined, 30, message=f"group {group} served")


@contextlib.contextmanager
def group_broker(config: dict[str, str], heartbeat_api: int, **fields: Any) -> Iterator[BrokerProcess]:
    """A broker with `config` for a module of group tests, yielded once it serves groups (a
    warm-up member joined with `heartbeat_api` and `fields`, see join_when_loaded)."""
    with running_broker(config=config) as process:
        with RawConnection(process.bootstrap) as connection:
            join_when_loaded(connection, heartbeat_api, unique("warm-up"), unique("m"), "no-such-topic", **fields)
        yield process


def raw_request(bootstrap: str, api_key: int, version: int, source: str | None = None, **fields: Any) -> Any:
    """One kio request on a fresh socket (from the local address `source`, if given)."""
    with RawConnection(bootstrap, source=source) as connection:
        return connection.call(api_key, version, **fields)


PRODUCE, FETCH, LIST_OFFSETS, METADATA, CREATE_TOPICS, INIT_PRODUCER_ID = 0, 1, 2, 3, 19, 22
PRODUCE_VERSION = 9


def produce_body(topic: str, batch: bytes, partition: int = 0, acks: int = -1) -> bytes:
    """An encoded Produce v9 request body carrying one batch for one partition."""
    schema = produce_v9
    request = schema.ProduceRequest(
        transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=10),
        topic_data=(schema.TopicProduceData(
            name=topic, partition_data=(schema.PartitionProduceData(index=partition, records=batch),)),),
    )
    return b"".join(codec.encode(request))


def raw_produce(connection: RawConnection, topic: str, batch: bytes, partition: int = 0) -> tuple[int, int]:
    """Produce one raw batch (acks=-1); returns (error code, base offset)."""
    response = connection.call_body(PRODUCE, PRODUCE_VERSION, produce_body(topic, batch, partition))
    result = response.responses[0].partition_responses[0]
    return int(result.error_code), int(result.base_offset)


def ballast(disk: str, leave: int, name: str = "ballast") -> str:
    """Fill `disk` to within `leave` bytes of full with one file (named `name`).

    A tmpfs's free count is approximate (per-CPU counters) while the broker writes checkpoints,
    so the one unbuffered write may find the disk full a few pages early: full is what was asked.
    """
    path = os.path.join(disk, name)
    stats = os.statvfs(disk)
    with open(path, "wb", buffering=0) as handle:
        try:
            handle.write(b"\0" * max(stats.f_bavail * stats.f_frsize - leave, 0))
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    return path


def read_values(bootstrap: str, partitions: list[tuple[str, int]], done: Callable[[list[bytes], Consumer], bool],
                isolation: str = "read_uncommitted", timeout: float = 20.0) -> list[bytes]:
    """The values confluent-kafka delivers from the start of `partitions` with `isolation`, read
    until `done(values so far, consumer)`; fails after `timeout` seconds."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "isolation.level": isolation,
                         "enable.auto.commit": False, **QUIET})
    consumer.assign([TopicPartition(topic, index, 0) for topic, index in partitions])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while not done(values, consumer):
            assert time.monotonic() < deadline, f"read {len(values)} values, then nothing more that was wanted"
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def transactional_producer(bootstrap: str, transactional_id: str, timeout: float = 20.0, **config: object) -> Producer:
    """A confluent-kafka producer with `transactional.id`, initialized."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **QUIET, **config})
    producer.init_transactions(timeout)
    return producer


def commit_sentinels(bootstrap: str, partitions: list[tuple[str, int]], timeout: float = 20.0) -> set[bytes]:
    """One committed transaction with a record per partition: written last, what readers wait for
    (once a read_committed reader has them, it has seen everything written before)."""
    producer = transactional_producer(bootstrap, f"sentinel-{uuid.uuid4().hex[:6]}", timeout)
    producer.begin_transaction()
    sentinels = set()
    for topic, index in partitions:
        value = f"sentinel-{topic}-{index}".encode()
        producer.produce(topic, value=value, partition=index)
        sentinels.add(value)
    producer.commit_transaction(timeout)
    return sentinels


class ConsoleProcess:
    """`logbus console` in a subprocess on a free loopback port; `get`/`post` speak plain HTTP to it."""

    def __init__(self, process: subprocess.Popen, port: int) -> None:
        self.process = process
        self.url = f"http://127.0.0.1:{port}"

    def get(self, path: str) -> tuple[int, str]:
        return self._open(urllib.request.Request(self.url + path))

    def post(self, path: str, form: dict[str, str]) -> tuple[int, str]:
        return self._open(urllib.request.Request(self.url + path, data=urllib.parse.urlencode(form).encode()))

    def csrf_token(self) -> str:
        status, page = self.get("/topics")
        assert status == 200, page
        return page.split('name="csrf" value="', 1)[1].split('"', 1)[0]

    @staticmethod
    def _open(request: urllib.request.Request) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()


@contextlib.contextmanager
def running_console(bootstrap: str, *options: str, ready_timeout: float = 30.0) -> Iterator[ConsoleProcess]:
    """A started console of the cluster at `bootstrap`, its cluster page answering; stopped afterwards."""
    from logbus.testing import free_test_port

    port = free_test_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "logbus", "console", "--bootstrap-server", bootstrap, "--port", str(port), *options],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    console = ConsoleProcess(process, port)
    try:
        wait_until(lambda: _answers(console), timeout=ready_timeout, interval=0.1, message="the console to answer")
        yield console
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stderr.close()


def _answers(console: ConsoleProcess) -> bool:
    if console.process.poll() is not None:
        raise AssertionError(f"the console exited: {console.process.stderr.read()}")
    try:
        return console.get("/")[0] == 200
    except OSError:
        return False
