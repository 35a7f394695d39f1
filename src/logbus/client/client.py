"""A small blocking Kafka client: Metadata, ListOffsets and Fetch, and any other request through
`call_any`, `call_broker` or `call_leader` (a kio body from `apis.api_module`).

The Spark connector reads with it (and, through `spark/txn_client.TxnClient`, writes
transactions); the CLI tools and the console send it the admin requests that confluent-kafka's
AdminClient does not offer (`admin.py`, `logbus reassign`, `logbus transactions` ...).

Fetch answers are returned as the raw record-set bytes so that `logbus.spark.decode` can turn
them into Arrow columns without a Python object per record (Metadata v12, ListOffsets v7, Fetch
v12: topics by name, flexible encoding). Partition leaders come from Metadata; requests go to
the leader's connection (`connection.py`), opened on first use, secured as `security.py` says.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Self

from kio.schema.errors import ErrorCode

from ..protocol.codec import make
from .apis import FETCH, LIST_OFFSETS, METADATA, api_module
from .connection import Connection
from .errors import KafkaError
from .security import ClientSecurity

EARLIEST, LATEST = -2, -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


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


class Client:
    """Metadata, offsets and fetches against a cluster, routed to partition leaders."""

    def __init__(self, bootstrap_servers: str, timeout: float = 30.0, security: ClientSecurity | None = None) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.timeout = timeout
        self.security = security
        self.brokers: dict[int, tuple[str, int]] = {}
        self.controller_id = -1  # as the last Metadata answer named it
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
        `replicas` and `controller_id`.

        Topics that do not exist are left out; they are not auto-created.
        """
        module = api_module(METADATA)
        wanted = None if topics is None else tuple(
            make(module.request.MetadataRequestTopic, topic_id=None, name=name) for name in topics
        )
        request = make(module.request_cls, topics=wanted, allow_auto_topic_creation=False,
                       include_topic_authorized_operations=False)
        response = self._call(self._any_connection(), METADATA, request)
        self.brokers = {broker.node_id: (broker.host, broker.port) for broker in response.brokers}
        self.controller_id = response.controller_id
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
        module = api_module(LIST_OFFSETS)
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
        module = api_module(FETCH)
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
