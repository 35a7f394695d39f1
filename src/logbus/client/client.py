"""A small blocking Kafka client for the Spark connector: Metadata, ListOffsets and Fetch (and,
through `txn_client.TxnClient`, the requests of a transactional producer).

`logbus reassign` and `logbus transactions` share it for the admin requests that
confluent-kafka's AdminClient does not offer: they build a kio request body and send it with
`call_any`, `call_broker` or `call_leader`.

It speaks the wire protocol through `logbus.protocol` (framing) and kio (typed bodies), one
request at a time per connection, at fixed versions every Kafka broker since 3.0 serves
(Metadata v12, ListOffsets v7, Fetch v12: topics by name, flexible encoding). Fetch answers are
returned as the raw record-set bytes so that `logbus.spark.decode` can turn them into Arrow
columns without a Python object per record. Partition leaders come from Metadata; requests go
to the leader's connection, opened on first use.

Secured listeners take the settings a librdkafka client would (`ClientSecurity.from_settings`):
`security.protocol` SSL or SASL_SSL wraps each socket in TLS (`ssl.ca.location`, hostname checked
unless `ssl.endpoint.identification.algorithm=none`, `ssl.certificate.location` and
`ssl.key.location` for a client certificate); SASL_PLAINTEXT or SASL_SSL logs in first with
`sasl.mechanism` PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 as `sasl.username` / `sasl.password`.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Self

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.constants import EntityType

from ..protocol import tolerant
from ..protocol.codec import ChunkSink, make, request_class
from ..protocol.frames import MalformedRequestError
from ..security.sasl_client import SaslLogin, SaslLoginError

METADATA, LIST_OFFSETS, FETCH = 3, 2, 1
ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 45, 46  # for `logbus reassign`, which shares this client
VERSIONS = {METADATA: 12, LIST_OFFSETS: 7, FETCH: 12, ALTER_REASSIGNMENTS: 0, LIST_REASSIGNMENTS: 0}
EARLIEST, LATEST = -2, -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
CLIENT_ID = "logbus-spark"
_SIZE = struct.Struct(">i")
# `logbus transactions`' requests (ListTransactions: the version its filters need, up to v2).
FIND_COORDINATOR, WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 10, 27, 61, 65, 66
VERSIONS.update({FIND_COORDINATOR: 3, WRITE_TXN_MARKERS: 1, DESCRIBE_PRODUCERS: 0, DESCRIBE_TRANSACTIONS: 0,
                 LIST_TRANSACTIONS: 0})
# The transactional producer's requests (`logbus.spark.txn_client`; FindCoordinator v3 as above),
# flexible versions Kafka 3.0+ serves.
PRODUCE, OFFSET_FETCH, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = 0, 9, 22, 24, 25, 26
TXN_OFFSET_COMMIT = 28
VERSIONS.update({PRODUCE: 9, OFFSET_FETCH: 7, INIT_PRODUCER_ID: 4, ADD_PARTITIONS_TO_TXN: 3, ADD_OFFSETS_TO_TXN: 3,
                 END_TXN: 3, TXN_OFFSET_COMMIT: 3})


class KafkaError(RuntimeError):
    """A request failed: connection trouble or an error code the caller cannot handle."""


class AuthenticationError(KafkaError):
    """The TLS handshake failed or the broker refused the SASL login (Kafka's AuthenticationException):
    trying again with the same settings cannot help, so callers that retry lost connections do not."""


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How to reach a secured listener: TLS around the socket, a SASL login on it, or both."""

    tls: ssl.SSLContext | None = None
    sasl: SaslLogin | None = None

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> ClientSecurity:
        """From librdkafka-style settings (those of `--command-config`); KafkaError when unusable."""
        protocol = str(settings.get("security.protocol", "plaintext")).upper()
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise KafkaError(f"security.protocol={protocol} is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL")
        return cls(_tls_context(settings) if protocol.endswith("SSL") else None,
                   _sasl_login(settings) if protocol.startswith("SASL") else None)


def _tls_context(settings: Mapping[str, Any]) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=settings.get("ssl.ca.location") or None)
        if str(settings.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
            context.check_hostname = False
        if settings.get("ssl.certificate.location"):
            context.load_cert_chain(settings["ssl.certificate.location"], settings.get("ssl.key.location"),
                                    settings.get("ssl.key.password"))
    except (OSError, ssl.SSLError) as exc:
        raise KafkaError(f"cannot set up TLS: {exc}") from None
    return context


def _sasl_login(settings: Mapping[str, Any]) -> SaslLogin:
    mechanism = str(settings.get("sasl.mechanism", "GSSAPI")).upper()
    if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        raise KafkaError(f"sasl.mechanism={mechanism}: this client logs in with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
    if not settings.get("sasl.username"):
        raise KafkaError("SASL needs sasl.username and sasl.password")
    return SaslLogin(mechanism, str(settings["sasl.username"]), str(settings.get("sasl.password", "")))


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """One partition's part of a Fetch answer."""

    error: ErrorCode
    high_watermark: int
    log_start_offset: int
    records: bytes
    aborted: tuple[tuple[int, int], ...] = ()  # read_committed: (producer id, first offset) of aborted transactions


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """'host:port,host:port' -> [(host, port), ...]."""
    result = []
    for item in servers.split(","):
        host, _, port = item.strip().rpartition(":")
        result.append((host.strip("[]") or "127.0.0.1", int(port)))
    if not result:
        raise ValueError("no bootstrap servers given")
    return result


class _Module:
    """The kio classes of one API at one version."""

    def __init__(self, api_key: int, version: int) -> None:
        self.api_key = api_key
        self.version = version
        self.request = load_payload_module(api_key, self.version, EntityType.request)
        self.response = load_payload_module(api_key, self.version, EntityType.response)
        self.request_cls = _entity(self.request, EntityType.request)
        self.response_cls = _entity(self.response, EntityType.response)
        self.write_header = entity_writer(self.request.RequestHeader)
        self.write_body = entity_writer(self.request_cls)
        self.read_header = entity_reader(self.response.ResponseHeader)
        self.read_body = entity_reader(self.response_cls)


def _entity(module: Any, entity_type: EntityType) -> type:
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "__type__", None) is entity_type:
            return value
    raise LookupError(f"no {entity_type.name} in {module.__name__}")


_MODULES: dict[tuple[int, int], _Module] = {}


def _module(api_key: int, version: int | None = None) -> _Module:
    """`api_key`'s classes at `version`, by default the one in VERSIONS."""
    key = (api_key, VERSIONS[api_key] if version is None else version)
    if key not in _MODULES:
        _MODULES[key] = _Module(*key)
    return _MODULES[key]


def _read_body(module: _Module, frame: bytes, offset: int) -> Any:
    """kio's native reader refuses an unknown tagged field (a newer broker may add one) and a
    timestamp of -1 (Kafka's "none"); such a response is decoded again by `tolerant.decode`."""
    try:
        return module.read_body(frame, offset)[0]
    except (SerialError, KeyError):
        pass
    try:
        return tolerant.decode(module.response_cls, frame, offset)
    except MalformedRequestError as exc:
        raise KafkaError(f"undecodable response to API {module.api_key} v{module.version}: {exc}") from None


FIRST_READ_BYTES = 1 << 20
MAX_RESPONSE_BYTES = 1 << 30  # far above any answer this client asks for: a larger size is a broken peer


class Connection:
    """One blocking socket to one broker; requests are strictly one after the other."""

    def __init__(self, host: str, port: int, timeout: float, security: ClientSecurity | None = None) -> None:
        self.address = (host, port)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation = 0
        security = security or ClientSecurity()
        try:
            if security.tls is not None:
                self.sock = security.tls.wrap_socket(self.sock, server_hostname=host)
            if security.sasl is not None:
                self._log_in(security.sasl)
        except (ssl.SSLError, SaslLoginError) as exc:
            self.sock.close()
            raise AuthenticationError(f"{host}:{port}: {exc}") from None

    def _log_in(self, login: SaslLogin) -> None:
        steps = login.steps()
        request = next(steps)
        while True:
            api_key, version, fields = request
            answer = self.call(api_key, make(request_class(api_key, version), **fields), version)
            try:
                request = steps.send(answer)
            except StopIteration:
                return

    def call(self, api_key: int, body: Any, version: int | None = None) -> Any:
        """Send `body` (a kio request of `version`, by default VERSIONS') and return the answer."""
        module = _module(api_key, version)
        self.correlation += 1
        sink = ChunkSink()
        module.write_header(sink, module.request.RequestHeader(
            request_api_key=api_key, request_api_version=module.version,
            correlation_id=self.correlation, client_id=CLIENT_ID,
        ))
        module.write_body(sink, body)
        payload = b"".join(sink)
        self.sock.sendall(_SIZE.pack(len(payload)) + payload)
        frame = self._receive_frame()
        header, used = module.read_header(frame, 0)
        if header.correlation_id != self.correlation:
            raise KafkaError(f"correlation id {header.correlation_id}, expected {self.correlation}")
        return _read_body(module, frame, used)

    def _receive_frame(self) -> bytes:
        (size,) = _SIZE.unpack(self._receive_exactly(4))
        if not 0 <= size <= MAX_RESPONSE_BYTES:
            raise KafkaError(f"{self.address[0]}:{self.address[1]} announced a response of {size} bytes")
        return bytes(self._receive_exactly(size))

    def _receive_exactly(self, size: int) -> bytearray:
        """`size` bytes. The buffer grows (doubling) as they arrive, so a peer that announces more
        than it sends costs no more memory than it sent."""
        buffer = bytearray(min(size, FIRST_READ_BYTES))
        received = 0
        while received < size:
            if received == len(buffer):
                buffer.extend(bytes(min(len(buffer), size - received)))
            count = self.sock.recv_into(memoryview(buffer)[received:])
            if count == 0:
                raise KafkaError(f"connection to {self.address[0]}:{self.address[1]} closed")
            received += count
        return buffer

    def close(self) -> None:
        self.sock.close()


class Client:
    """Metadata, offsets and fetches against a cluster, routed to partition leaders."""

    def __init__(self, bootstrap_servers: str, timeout: float = 30.0, security: ClientSecurity | None = None) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.timeout = timeout
        self.security = security
        self.brokers: dict[int, tuple[str, int]] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        self.replicas: dict[tuple[str, int], tuple[int, ...]] = {}
        self._connections: dict[tuple[str, int], Connection] = {}

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], **options: Any) -> Self:
        """A client of `settings["bootstrap.servers"]`, secured as its librdkafka-style settings say
        (`ClientSecurity.from_settings`: KafkaError when unusable); `options` go to the constructor."""
        return cls(settings["bootstrap.servers"], security=ClientSecurity.from_settings(settings), **options)

    # ---------------------------------------------------------------- connections

    def _connection(self, address: tuple[str, int]) -> Connection:
        if address not in self._connections:
            self._connections[address] = Connection(*address, self.timeout, self.security)
        return self._connections[address]

    def _any_connection(self) -> Connection:
        errors = []
        for address in [*self._connections, *self.brokers.values(), *self.bootstrap]:
            try:
                return self._connection(address)
            except OSError as exc:
                errors.append(f"{address[0]}:{address[1]}: {exc}")
        raise KafkaError("no broker reachable: " + "; ".join(errors))

    def _call(self, connection: Connection, api_key: int, body: Any, version: int | None = None) -> Any:
        try:
            return connection.call(api_key, body, version)
        except (OSError, KafkaError):
            self._drop(connection)
            raise

    def _drop(self, connection: Connection) -> None:
        self._connections.pop(connection.address, None)
        connection.close()

    def _leader_connection(self, topic: str, partition: int) -> Connection:
        leader = self.leaders.get((topic, partition))
        if leader is None or leader not in self.brokers:
            self.partitions([topic])
            leader = self.leaders.get((topic, partition))
        if leader is None:
            raise KafkaError(f"{topic}-{partition}: UNKNOWN_TOPIC_OR_PARTITION")
        if leader not in self.brokers:
            raise KafkaError(f"no leader for {topic}-{partition}")
        return self._connection(self.brokers[leader])

    def call_any(self, api_key: int, body: Any, version: int | None = None) -> Any:
        """Send `body` to any reachable broker; its answer."""
        return self._call(self._any_connection(), api_key, body, version)

    def call_broker(self, broker_id: int, api_key: int, body: Any, version: int | None = None) -> Any:
        """Send `body` to broker `broker_id` (looked up in Metadata when not known yet)."""
        if broker_id not in self.brokers:
            self.partitions(())
        if broker_id not in self.brokers:
            raise KafkaError(f"broker {broker_id} is not in the cluster")
        return self._call(self._connection(self.brokers[broker_id]), api_key, body, version)

    def call_leader(self, topic: str, partition: int, api_key: int, body: Any) -> Any:
        """Send `body` to the leader of `topic`-`partition`."""
        return self._call(self._leader_connection(topic, partition), api_key, body)

    def close(self) -> None:
        for connection in list(self._connections.values()):
            connection.close()
        self._connections.clear()

    # ---------------------------------------------------------------- metadata

    def partitions(self, topics: Iterable[str] | None = None, internal: bool = False) -> dict[str, list[int]]:
        """Partition ids per existing topic (all topics when `topics` is None; internal ones only
        with `internal`). Also refreshes `brokers` (all a Metadata for `()` does), `leaders` and
        `replicas`.

        Topics that do not exist are left out; they are not auto-created.
        """
        module = _module(METADATA)
        wanted = None if topics is None else tuple(
            make(module.request.MetadataRequestTopic, topic_id=None, name=name) for name in topics
        )
        request = make(module.request_cls, topics=wanted, allow_auto_topic_creation=False,
                       include_topic_authorized_operations=False)
        response = self._call(self._any_connection(), METADATA, request)
        self.brokers = {broker.node_id: (broker.host, broker.port) for broker in response.brokers}
        result: dict[str, list[int]] = {}
        for topic in response.topics:
            if topic.error_code != ErrorCode.none:
                continue
            for p in topic.partitions:
                self.leaders[(topic.name, p.partition_index)] = p.leader_id
                self.replicas[(topic.name, p.partition_index)] = tuple(p.replica_nodes)
            if internal or not topic.is_internal:
                result[topic.name] = sorted(p.partition_index for p in topic.partitions)
        return result

    # ---------------------------------------------------------------- offsets

    def list_offsets(self, wanted: dict[tuple[str, int], int],
                     isolation_level: int = READ_UNCOMMITTED) -> dict[tuple[str, int], int]:
        """Offset per partition for a timestamp (or EARLIEST / LATEST); -1 when none.

        For a timestamp that is the first offset whose record timestamp is at or after it. LATEST
        is the high watermark, or with READ_COMMITTED the last stable offset (no record at or past
        it belongs to a transaction still open).
        """
        module = _module(LIST_OFFSETS)
        by_leader: dict[tuple[str, int], dict[str, list[Any]]] = {}
        for (topic, partition), timestamp in wanted.items():
            address = self._leader_connection(topic, partition).address
            by_leader.setdefault(address, {}).setdefault(topic, []).append(make(
                module.request.ListOffsetsPartition, partition_index=partition,
                current_leader_epoch=-1, timestamp=timestamp,
            ))
        result: dict[tuple[str, int], int] = {}
        for address, topics in by_leader.items():
            request = make(module.request_cls, replica_id=-1, isolation_level=isolation_level, topics=tuple(
                make(module.request.ListOffsetsTopic, name=name, partitions=tuple(parts))
                for name, parts in topics.items()
            ))
            response = self._call(self._connection(address), LIST_OFFSETS, request)
            for topic in response.topics:
                for answer in topic.partitions:
                    if answer.error_code != ErrorCode.none:
                        self.leaders.pop((topic.name, answer.partition_index), None)
                        raise KafkaError(
                            f"ListOffsets {topic.name}-{answer.partition_index}: {answer.error_code.name}"
                        )
                    result[(topic.name, answer.partition_index)] = answer.offset
        return result

    # ---------------------------------------------------------------- fetch

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int = 500,
              isolation_level: int = READ_UNCOMMITTED) -> PartitionFetch:
        """Fetch one partition from `offset`: the raw record set and the partition's bounds.

        With READ_COMMITTED the broker returns records below the last stable offset only, and
        names the aborted transactions among them, which the reader must skip (`decode`)."""
        module = _module(FETCH)
        request = make(
            module.request_cls, cluster_id=None, replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=max_bytes,
            isolation_level=isolation_level, session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
            topics=(make(module.request.FetchTopic, topic=topic, partitions=(make(
                module.request.FetchPartition, partition=partition, current_leader_epoch=-1,
                fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=max_bytes,
            ),)),),
        )
        response = self._call(self._leader_connection(topic, partition), FETCH, request)
        if response.error_code != ErrorCode.none:
            raise KafkaError(f"Fetch {topic}-{partition}: {response.error_code.name}")
        answer = response.responses[0].partitions[0]
        if answer.error_code in (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch):
            self.leaders.pop((topic, partition), None)
        aborted = tuple((txn.producer_id, txn.first_offset) for txn in answer.aborted_transactions or ())
        return PartitionFetch(answer.error_code, answer.high_watermark, answer.log_start_offset,
                              bytes(answer.records or b""), aborted)
