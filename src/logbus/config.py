"""Broker and topic configuration, with Kafka's names, types and defaults.

A broker config is Kafka's `server.properties` plus `--set` overrides. A topic's effective
config is its own overrides on top of the broker's topic defaults (each topic key has broker
synonyms, e.g. `retention.ms` <- `log.retention.ms` / `log.retention.minutes` /
`log.retention.hours`). DescribeConfigs reports where each value came from.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any

from .cluster.replica_selector import SELECTORS
from .errors import ConfigError
from .logging_config import COMPONENTS, LEVEL_KEY, LOG_FORMATS, check_level, component_key

LONG_MAX = 9223372036854775807
GIB = 1 << 30
MIB = 1 << 20


class ConfigSource(IntEnum):
    """DescribeConfigs source codes, as Kafka numbers them."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_GROUP_CONFIG = 8  # Kafka's GROUP_CONFIG (KIP-848)


class ConfigType(IntEnum):
    """DescribeConfigs (v3+) config types."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text!r}")
    return lowered == "true"


def _parse_list(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _java_integer(bits: int, type_name: str) -> Callable[[str], int]:
    """An integer that fits Java's `bits`-bit type, as Kafka's ConfigDef parses one."""
    def parse(text: str) -> int:
        if "_" in text:  # Python's int() takes 1_000; Java's parseInt does not
            raise ValueError(f"Not a number of type {type_name}")
        value = int(text.strip())
        if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
            raise ValueError(f"Not a number of type {type_name}")
        return value
    return parse


_PARSERS: dict[ConfigType, Callable[[str], object]] = {
    ConfigType.BOOLEAN: _parse_bool,
    ConfigType.STRING: str,
    ConfigType.INT: _java_integer(32, "INT"),
    ConfigType.SHORT: _java_integer(16, "SHORT"),
    ConfigType.LONG: _java_integer(64, "LONG"),
    ConfigType.DOUBLE: float,
    ConfigType.LIST: _parse_list,
    ConfigType.PASSWORD: str,
}


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    type: ConfigType
    default: str | None
    doc: str = ""
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    check: Callable[[object], None] | None = None  # raises ValueError with Kafka's reason

    def parse(self, text: str) -> object:
        try:
            value = _PARSERS[self.type](text)
        except ValueError as exc:
            raise ConfigError(f"Invalid value {text!r} for configuration {self.name}: {exc}") from None
        items = value if isinstance(value, tuple) else (value,)
        if self.choices and any(item not in self.choices for item in items):
            raise ConfigError(
                f"Invalid value {text!r} for configuration {self.name}: "
                f"must be one of {', '.join(self.choices)}"
            )
        if self.minimum is not None and isinstance(value, int | float) and value < self.minimum:
            raise ConfigError(
                f"Invalid value {text!r} for configuration {self.name}: "
                f"must be at least {self.minimum:g}"
            )
        if self.maximum is not None and isinstance(value, int | float) and value > self.maximum:
            raise ConfigError(
                f"Invalid value {text!r} for configuration {self.name}: "
                f"must be at most {self.maximum:g}"
            )
        if self.check is not None:
            try:
                self.check(value)
            except ValueError as exc:
                raise ConfigError(f"Invalid value {text!r} for configuration {self.name}: {exc}") from None
        return value


def _key(name: str, type_: ConfigType, default: object, doc: str = "", **kw: object) -> ConfigKey:
    text = None if default is None else str(default).lower() if isinstance(default, bool) else str(default)
    return ConfigKey(name, type_, text, doc, **kw)  # type: ignore[arg-type]


LONG, INT, STR, BOOL, DOUBLE = (
    ConfigType.LONG, ConfigType.INT, ConfigType.STRING, ConfigType.BOOLEAN, ConfigType.DOUBLE
)
_POLICIES = ("delete", "compact")
_THROTTLED_REPLICA = re.compile(r"[0-9]+:[0-9]+")


def _throttled_replicas(value: object) -> None:
    """Kafka's ThrottledReplicaListValidator: `*`, or partitionId:brokerId pairs."""
    items = value if isinstance(value, tuple) else ()
    if items == ("*",) or all(_THROTTLED_REPLICA.fullmatch(item) for item in items):
        return
    raise ValueError(
        "must be the literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
    )


def _gzip_level(value: object) -> None:
    """gzip levels are 1..9, or -1 for zlib's default (Kafka's GZIP.levelValidator)."""
    if value != -1 and not 1 <= value <= 9:  # type: ignore[operator]
        raise ValueError("must be between 1 and 9, or -1")


def _consumer_assignors(value: object) -> None:
    from .coordinator.assignors import ASSIGNORS, assignor_name

    names = [assignor_name(name) for name in value]  # type: ignore[attr-defined]
    if not names or any(name not in ASSIGNORS for name in names):
        raise ValueError(f"each must be one of {', '.join(ASSIGNORS)}")


def _migration_policy(value: object) -> None:
    from .coordinator.migration import MigrationPolicy

    try:
        MigrationPolicy.parse(str(value))
    except ValueError:
        raise ValueError("must be disabled, upgrade, downgrade or bidirectional") from None


def _group_bounds(kind: str, setting: str, default: int, low: int, high: int) -> list[ConfigKey]:
    """`group.<kind>.<setting>` and its min/max (e.g. group.consumer.min.session.timeout.ms):
    the default of a group's `<kind>.<setting>` config and the range it must keep."""
    what = f"{setting.removesuffix('.ms').replace('.', ' ')} of {kind} groups (KIP-848), in ms"
    least = 1000 if setting.startswith("record.") else 1  # Kafka's lower bound of the lock duration keys
    return [
        _key(f"group.{kind}.{setting}", INT, default, f"Default {what}.", minimum=least),
        _key(f"group.{kind}.min.{setting}", INT, low, f"Smallest {what}.", minimum=least),
        _key(f"group.{kind}.max.{setting}", INT, high, f"Largest {what}.", minimum=least),
    ]


_TS_TYPES = ("CreateTime", "LogAppendTime")
_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

BROKER_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        _key("broker.id", INT, 0, "This broker's integer id."),
        _key("log.dirs", STR, None, "Directory holding the partition logs (one directory)."),
        _key("log.dir", STR, None, "Data directory when log.dirs is unset (with neither: ./data)."),
        _key("listeners", STR, None, "NAME://host:port,... to listen on, e.g. PLAINTEXT://127.0.0.1:9092 "
             "(port 0: any free port)."),
        _key("advertised.listeners", STR, None, "NAME://host:port,... given to clients in Metadata, per listener "
             "(empty host or port 0: the bound one)."),
        _key("listener.security.protocol.map", STR,
             "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
             "Listener name to security protocol."),
        _key("inter.broker.listener.name", STR, None, "The listener brokers use to reach each other."),
        _key("security.inter.broker.protocol", STR, "PLAINTEXT",
             "Inter-broker listener when inter.broker.listener.name is unset: the one named after this protocol."),
        _key("ssl.keystore.type", STR, "JKS", "Format of the key store; PEM is the one logbus reads."),
        _key("ssl.keystore.location", STR, None, "PEM file holding the broker's private key and certificate chain."),
        _key("ssl.keystore.certificate.chain", ConfigType.PASSWORD, None, "The certificate chain as inline PEM."),
        _key("ssl.keystore.key", ConfigType.PASSWORD, None, "The private key as inline PEM."),
        _key("ssl.key.password", ConfigType.PASSWORD, None, "Password of an encrypted private key."),
        _key("ssl.truststore.type", STR, "JKS", "Format of the trust store; PEM is the one logbus reads."),
        _key("ssl.truststore.location", STR, None, "PEM bundle of the CAs trusted for client and broker certificates."),
        _key("ssl.client.auth", STR, "none", "Client certificates: none, requested or required.",
             choices=("none", "requested", "required")),
        _key("ssl.enabled.protocols", ConfigType.LIST, "TLSv1.2,TLSv1.3", "TLS versions allowed.",
             choices=("TLSv1.2", "TLSv1.3")),
        _key("ssl.cipher.suites", ConfigType.LIST, None, "Cipher suites (OpenSSL names) for TLS 1.2; unset: "
             "OpenSSL's defaults."),
        _key("ssl.principal.mapping.rules", STR, "DEFAULT", "Rules mapping a client certificate's DN to a "
             "principal name."),
        _key("ssl.endpoint.identification.algorithm", STR, "https", "https: a broker checks the host name of "
             "the broker it connects to against its certificate; empty: no check."),
        _key("num.partitions", INT, 1, "Partitions of an auto-created topic.", minimum=1),
        _key("default.replication.factor", INT, 1, "Replication factor of auto-created topics."),
        _key("auto.create.topics.enable", BOOL, True, "Create unknown topics on Metadata."),
        _key("delete.topic.enable", BOOL, True, "Allow DeleteTopics."),
        _key("max.partitions", INT, 100000, "Most partitions this broker hosts, all topics together (logbus).",
             minimum=1),
        _key("log.segment.bytes", INT, GIB, "Segment size before a roll.", minimum=14),
        _key("log.roll.hours", INT, 168, "Age of a segment before a roll."),
        _key("log.roll.ms", LONG, None, "Overrides log.roll.hours."),
        _key("log.retention.hours", INT, 168, "Keep records this long."),
        _key("log.retention.minutes", INT, None, "Overrides log.retention.hours."),
        _key("log.retention.ms", LONG, None, "Overrides log.retention.minutes; -1 keeps forever."),
        _key("log.retention.bytes", LONG, -1, "Max partition size before old segments go; -1: no limit."),
        _key("log.retention.check.interval.ms", LONG, 300000, "How often retention runs.", minimum=1),
        _key("log.segment.delete.delay.ms", LONG, 60000, "Delay before a removed segment's files go."),
        _key("log.flush.interval.messages", LONG, LONG_MAX, "fsync after this many messages.", minimum=1),
        _key("log.flush.interval.ms", LONG, None, "fsync data older than this; default: scheduler interval."),
        _key("log.flush.scheduler.interval.ms", LONG, LONG_MAX, "How often the flusher checks logs."),
        _key("log.flush.offset.checkpoint.interval.ms", INT, 60000, "Recovery point checkpoint interval."),
        _key("log.flush.start.offset.checkpoint.interval.ms", INT, 60000, "Log start checkpoint interval."),
        _key("log.index.interval.bytes", INT, 4096, "Bytes between offset index entries.", minimum=0),
        _key("log.index.size.max.bytes", INT, 10 * MIB, "Max index size; a full index rolls the segment."),
        _key("log.cleanup.policy", ConfigType.LIST, "delete", "delete and/or compact.", choices=_POLICIES),
        _key("log.message.timestamp.type", STR, "CreateTime", "CreateTime or LogAppendTime.", choices=_TS_TYPES),
        _key("log.message.timestamp.before.max.ms", LONG, LONG_MAX,
             "Refuse CreateTime records older than this (INVALID_TIMESTAMP).", minimum=0),
        _key("log.message.timestamp.after.max.ms", LONG, 3600000,
             "Refuse CreateTime records further in the future than this (INVALID_TIMESTAMP).", minimum=0),
        _key("compression.type", STR, "producer", "Codec batches are stored with; producer keeps the client's.",
             choices=_COMPRESSION_TYPES),
        _key("log.cleaner.enable", BOOL, True, "Run the log cleaner for compacted topics."),
        _key("log.cleaner.delete.retention.ms", LONG, 86400000, "How long tombstones are kept."),
        _key("log.cleaner.min.cleanable.ratio", DOUBLE, 0.5, "Dirty ratio that makes a log cleanable.", minimum=0,
             maximum=1),
        _key("log.cleaner.min.compaction.lag.ms", LONG, 0, "Records younger than this stay uncompacted."),
        _key("log.cleaner.max.compaction.lag.ms", LONG, LONG_MAX, "Records older than this are compacted."),
        _key("log.cleaner.backoff.ms", LONG, 15000, "Sleep of the cleaner when nothing is cleanable."),
        _key("message.max.bytes", INT, 1048588, "Largest record batch accepted.", minimum=0),
        _key("socket.request.max.bytes", INT, 100 * MIB, "Largest request frame accepted.", minimum=1),
        _key("max.request.partition.size.limit", INT, 2000, "Most partitions one DescribeTopicPartitions "
             "response describes.", minimum=1),
        _key("socket.sendfile", STR, "remote", "Fetched records by sendfile: remote (readers not on loopback), "
             "always or never.", choices=("remote", "always", "never")),
        _key("queued.max.request.bytes", LONG, -1, "Received request bytes not yet processed, broker-wide, "
             "before no more requests are read; -1: no limit.", minimum=-1),
        _key("max.connections", INT, 2147483647, "Open connections; new ones over it are closed.", minimum=0),
        _key("max.connections.per.ip", INT, 2147483647, "Open connections per client address; new ones over "
             "it are closed.", minimum=0),
        _key("max.connection.creation.rate", INT, 2147483647, "New connections accepted per second, broker-wide "
             "(listener.name.<l>.max.connection.creation.rate: on one listener); accepting waits while over it. "
             "The inter-broker listener is held only to its own listener rate.", minimum=0),
        _key("connections.max.idle.ms", LONG, 600000, "Close connections idle this long; -1: never.", minimum=-1),
        _key("min.insync.replicas", INT, 1, "Replicas that must acknowledge acks=all.", minimum=1),
        _key("offsets.topic.num.partitions", INT, 50, "Partitions of __consumer_offsets.", minimum=1),
        _key("offsets.topic.replication.factor", ConfigType.SHORT, 3, "Replicas of __consumer_offsets (capped "
             "by the live brokers when it is first created).", minimum=1),
        _key("offsets.topic.segment.bytes", INT, 100 * MIB, "Segment size of __consumer_offsets."),
        _key("offsets.retention.minutes", INT, 10080, "Expire offsets of empty groups after this."),
        _key("offsets.retention.check.interval.ms", LONG, 600000, "How often offsets expire."),
        _key("group.initial.rebalance.delay.ms", INT, 3000, "Wait for more members of a new group."),
        _key("group.min.session.timeout.ms", INT, 6000, "Smallest session timeout allowed."),
        _key("group.max.session.timeout.ms", INT, 1800000, "Largest session timeout allowed."),
        _key("group.max.size", INT, 2147483647, "Most members in one group."),
        _key("transactional.id.expiration.ms", INT, 604800000, "Forget a transactional id idle this long."),
        _key("transaction.state.log.num.partitions", INT, 50, "Partitions of __transaction_state.", minimum=1),
        _key("transaction.state.log.replication.factor", ConfigType.SHORT, 3, "Replicas of __transaction_state "
             "(capped by the live brokers when it is first created).", minimum=1),
        _key("transaction.state.log.segment.bytes", INT, 100 * MIB, "Segment size of __transaction_state."),
        _key("transaction.state.log.min.isr", INT, 2, "min.insync.replicas of __transaction_state (capped by "
             "its replication factor).", minimum=1),
        _key("share.coordinator.state.topic.num.partitions", INT, 50, "Partitions of __share_group_state.",
             minimum=1),
        _key("share.coordinator.state.topic.replication.factor", ConfigType.SHORT, 3, "Replicas of "
             "__share_group_state (capped by the live brokers when it is first created).", minimum=1),
        _key("share.coordinator.state.topic.segment.bytes", INT, 100 * MIB, "Segment size of __share_group_state."),
        _key("share.coordinator.state.topic.min.isr", ConfigType.SHORT, 2, "min.insync.replicas of "
             "__share_group_state (capped by its replication factor).", minimum=1),
        _key("share.coordinator.snapshot.update.records.per.snapshot", INT, 500, "Update records of a "
             "share-partition's state between two snapshot records.", minimum=0, maximum=500),
        _key("share.coordinator.state.topic.prune.interval.ms", INT, 300000, "How often the share coordinator "
             "deletes the records of __share_group_state that newer snapshots made redundant.", minimum=1),
        _key("transaction.max.timeout.ms", INT, 900000, "Largest transaction timeout a producer may ask for.",
             minimum=1),
        _key("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, 10000, "How often transactions "
             "open past their timeout are aborted.", minimum=1),
        _key("transaction.remove.expired.transaction.cleanup.interval.ms", INT, 3600000, "How often idle "
             "transactional ids expire.", minimum=1),
        _key("transaction.partition.verification.enable", BOOL, True, "Partition leaders check with the "
             "transaction coordinator before a transaction's first batch (KIP-890)."),
        _key("producer.id.expiration.ms", INT, 86400000, "Forget idle idempotent producers after this."),
        # Authorization (issue 14): ACLs, on when an authorizer class is named.
        _key("authorizer.class.name", STR, "", "Any non-empty value (e.g. kafka.security.authorizer.AclAuthorizer "
             "or org.apache.kafka.metadata.authorizer.StandardAuthorizer) turns ACL authorization on; empty: off."),
        _key("super.users", STR, None, "Principals that may do everything, separated by semicolons "
             "(User:admin;User:broker)."),
        _key("allow.everyone.if.no.acl.found", BOOL, False, "With an authorizer: allow a resource that has no "
             "ACL at all to everyone (false: only super users)."),
        # The cluster (ZooKeeper mode): without zookeeper.connect the broker runs alone on its embedded store.
        _key("zookeeper.connect", STR, None, "host:port[,host:port...][/chroot] of the ZooKeeper ensemble that "
             "coordinates the cluster; unset: one broker on its embedded metadata store."),
        _key("zookeeper.session.timeout.ms", INT, 18000, "ZooKeeper session timeout: a broker silent this long "
             "is dead to the cluster.", minimum=1),
        _key("zookeeper.connection.timeout.ms", INT, None, "How long to wait for the first ZooKeeper connection; "
             "default: the session timeout.", minimum=1),
        _key("broker.rack", STR, None, "Rack of this broker; replicas spread over racks when every broker has one."),
        _key("replica.selector.class", STR, None, "Which replica a consumer (Fetch v11+) reads from (KIP-392): "
             "org.apache.kafka.common.replica.RackAwareReplicaSelector sends it to a replica in its client.rack; "
             "unset or ...LeaderSelector: the leader.", choices=SELECTORS),
        # SASL (on SASL_PLAINTEXT and SASL_SSL listeners). Default mechanisms: SCRAM only, not Kafka's
        # GSSAPI (no Kerberos here) and not PLAIN, which sends the password itself: opt in, over SASL_SSL.
        _key("sasl.enabled.mechanisms", ConfigType.LIST, "SCRAM-SHA-256,SCRAM-SHA-512", "SASL mechanisms "
             "clients may use: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.", choices=("PLAIN", "SCRAM-SHA-256",
                                                                                "SCRAM-SHA-512")),
        _key("connection.failed.authentication.delay.ms", INT, 100, "A failed authentication is answered this "
             "much later, then the connection closes (slows password guessing).", minimum=0),
        _key("connections.max.reauth.ms", LONG, 0, "SASL session lifetime: clients re-authenticate within it or "
             "are disconnected (KIP-368); 0: sessions do not expire.", minimum=0),
        _key("sasl.mechanism.inter.broker.protocol", STR, "GSSAPI", "SASL mechanism brokers log in with on a "
             "SASL inter-broker listener: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (GSSAPI is not offered)."),
        _key("sasl.jaas.config", ConfigType.PASSWORD, None, "JAAS login line with the broker's own user, for "
             "a SASL inter-broker listener (listener.name.<l>.<mechanism>.sasl.jaas.config wins)."),
        _key("sasl.server.max.receive.size", INT, 524288, "Largest frame accepted before SASL authentication "
             "completes.", minimum=1),
        # Client quotas (KIP-13, KIP-55, KIP-124, KIP-599): the windows usage is measured over.
        _key("quota.window.num", INT, 11, "Windows a client's byte rate and request time are measured over.",
             minimum=1),
        _key("quota.window.size.seconds", INT, 1, "Length of each quota window.", minimum=1),
        _key("controller.quota.window.num", INT, 11, "Windows of controller_mutation_rate's token bucket "
             "(the burst is rate * num * size).", minimum=1),
        _key("controller.quota.window.size.seconds", INT, 1, "Length of each controller quota window.", minimum=1),
        _key("controlled.shutdown.enable", BOOL, True, "On SIGTERM move leaderships away before stopping."),
        _key("controlled.shutdown.max.retries", INT, 3, "Times a stopping broker asks the controller to move its "
             "leaderships, waiting controlled.shutdown.retry.backoff.ms each time, before it stops anyway.",
             minimum=1),
        _key("controlled.shutdown.retry.backoff.ms", LONG, 5000, "How long each of those waits lasts.", minimum=1),
        _key("auto.leader.rebalance.enable", BOOL, True, "Move leadership back to preferred replicas."),
        _key("leader.imbalance.check.interval.seconds", LONG, 300, "How often the controller checks leader "
             "balance.", minimum=1),
        _key("leader.imbalance.per.broker.percentage", INT, 10, "Share of a broker's partitions led elsewhere "
             "before a preferred election.", minimum=0, maximum=100),
        _key("replica.lag.time.max.ms", LONG, 30000, "A follower not caught up for this long leaves the ISR.",
             minimum=1),
        _key("replica.fetch.max.bytes", INT, MIB, "Bytes per partition a follower asks for.", minimum=0),
        _key("replica.fetch.response.max.bytes", INT, 10 * MIB, "Bytes per response a follower asks for.",
             minimum=0),
        _key("replica.fetch.wait.max.ms", INT, 500, "Longest wait of a follower's fetch on the leader.", minimum=0),
        _key("replica.fetch.min.bytes", INT, 1, "Bytes a follower's fetch waits for.", minimum=1),
        _key("replica.fetch.backoff.ms", INT, 1000, "Pause after a failed follower fetch.", minimum=0),
        _key("num.replica.fetchers", INT, 1, "Fetcher connections per source broker.", minimum=1),
        _key("max.incremental.fetch.session.cache.slots", INT, 1000, "Incremental fetch sessions (KIP-227) the "
             "broker keeps; 0: none (every fetch is full).", minimum=0),
        _key("replica.socket.timeout.ms", INT, 30000, "A follower's fetch gives up after this.", minimum=1),
        _key("num.io.threads", INT, 8, "Kafka's request handler threads (accepted; no effect: requests are "
             "handled on the event loop).", minimum=1),
        _key("logbus.io.threads", INT, 8, "Threads for fsync and other blocking file work.", minimum=1),
        _key("logbus.open.segments.max", INT, None, "Segments whose files stay open (3 descriptors each), least "
             "recently used closed beyond it; unset: a ninth of the soft open-files limit.", minimum=1),
        # Metrics (issue 15): a Prometheus endpoint, off unless metrics.port is set.
        _key("metrics.port", INT, None, "Port of the Prometheus endpoint /metrics (0: any free port); unset: "
             "no endpoint and nothing counted.", minimum=0, maximum=65535),
        _key("metrics.host", STR, "127.0.0.1", "Address the metrics endpoint binds (0.0.0.0: every interface)."),
        # The broker's own log lines (logbus keys, named as log4j's loggers are): format and levels.
        _key("log.format", STR, "text", "text, or json: one object per line.", choices=LOG_FORMATS),
        _key(LEVEL_KEY, STR, "info", "Level of every logger (Kafka's names: trace, debug, info, warn, error, "
             "fatal, off).", check=check_level),
        *(_key(component_key(c), STR, None, f"Level of the logbus.{c} loggers; unset: log.level.",
               check=check_level) for c in COMPONENTS),
        # KIP-848 group configs' broker defaults and the bounds a group's own value must keep (GROUP_KEYS).
        *_group_bounds("consumer", "session.timeout.ms", 45000, 45000, 60000),
        *_group_bounds("consumer", "heartbeat.interval.ms", 5000, 5000, 15000),
        _key("group.consumer.assignors", ConfigType.LIST, "uniform,range", "Server-side assignors of consumer "
             "groups (uniform, range, or Kafka's class names); the first is the default.",
             check=_consumer_assignors),
        _key("group.consumer.max.size", INT, 2147483647, "Most members in one consumer group.", minimum=1),
        _key("group.consumer.migration.policy", STR, "bidirectional", "Online conversion between classic and "
             "consumer groups: disabled, upgrade, downgrade or bidirectional (any case).",
             check=_migration_policy),
        *_group_bounds("share", "session.timeout.ms", 45000, 45000, 60000),
        *_group_bounds("share", "heartbeat.interval.ms", 5000, 5000, 15000),
        *_group_bounds("share", "record.lock.duration.ms", 30000, 15000, 60000),
        _key("group.share.delivery.count.limit", INT, 5, "Deliveries of a record to share group members before "
             "it is given up (archived).", minimum=2, maximum=10),
        _key("group.share.partition.max.record.locks", INT, 2000, "Most records of one share-partition in flight "
             "(acquired or waiting for redelivery) at once.", minimum=100, maximum=10000),
        _key("group.share.max.size", INT, 200, "Most members in one share group.", minimum=1, maximum=1000),
        _key("group.share.max.share.sessions", INT, 2000, "Most share sessions this broker keeps (beyond: "
             "SHARE_SESSION_LIMIT_REACHED).", minimum=1),
        *_group_bounds("streams", "session.timeout.ms", 45000, 45000, 60000),
        *_group_bounds("streams", "heartbeat.interval.ms", 5000, 5000, 15000),
        _key("group.streams.num.standby.replicas", INT, 0, "Default standby replicas of a streams group.",
             minimum=0),
        _key("group.streams.max.standby.replicas", INT, 2, "Most standby replicas a streams group may ask "
             "for.", minimum=0),
        # Broker defaults of topic keys that Kafka 4.1 has (synonyms of the topic keys below).
        _key("log.roll.jitter.ms", LONG, None, "Overrides log.roll.jitter.hours."),
        _key("log.roll.jitter.hours", INT, 0, "Max random jitter subtracted from a segment's roll time.", minimum=0),
        _key("log.preallocate", BOOL, False, "Preallocate segment files (accepted; no effect here)."),
        _key("unclean.leader.election.enable", BOOL, False, "Elect an out-of-sync replica when no in-sync one "
             "is alive (data loss)."),
        _key("compression.gzip.level", INT, -1, "gzip level when the broker compresses.", check=_gzip_level),
        _key("compression.lz4.level", INT, 9, "lz4 level when the broker compresses.", minimum=1, maximum=17),
        _key("compression.zstd.level", INT, 3, "zstd level when the broker compresses.", minimum=-131072,
             maximum=22),
        _key("log.message.downconversion.enable", BOOL, True, "No-op since Kafka 4.0 (accepted, no effect)."),
        _key("log.local.retention.ms", LONG, -2, "Tiered storage: local retention (accepted; no effect here).",
             minimum=-2),
        _key("log.local.retention.bytes", LONG, -2, "Tiered storage: local retention size (accepted; no effect "
             "here).", minimum=-2),
    ]
}


@dataclass(frozen=True, slots=True)
class TopicKey:
    """A topic-level config and the broker keys it falls back to, in order."""

    key: ConfigKey
    synonyms: tuple[tuple[str, Callable[[object], object]], ...]


def _same(value: object) -> object:
    return value


def _minutes(value: object) -> object:
    return int(value) * 60_000  # type: ignore[call-overload]


def _hours(value: object) -> object:
    return int(value) * 3_600_000  # type: ignore[call-overload]


def _topic(
    name: str, type_: ConfigType, *synonyms: tuple[str, Callable], default: object = None, **kw: object
) -> TopicKey:
    """A topic key; its default is its broker synonyms', or `default` for keys without one."""
    return TopicKey(_key(name, type_, default, **kw), synonyms)  # type: ignore[arg-type]


TOPIC_KEYS: dict[str, TopicKey] = {
    t.key.name: t
    for t in [
        _topic("cleanup.policy", ConfigType.LIST, ("log.cleanup.policy", _same), choices=_POLICIES),
        _topic(
            "retention.ms", LONG, ("log.retention.ms", _same), ("log.retention.minutes", _minutes),
            ("log.retention.hours", _hours), minimum=-1,
        ),
        _topic("retention.bytes", LONG, ("log.retention.bytes", _same), minimum=-1),
        _topic("segment.bytes", INT, ("log.segment.bytes", _same), minimum=14),
        _topic("segment.ms", LONG, ("log.roll.ms", _same), ("log.roll.hours", _hours), minimum=1),
        _topic("segment.index.bytes", INT, ("log.index.size.max.bytes", _same), minimum=4),
        _topic("max.message.bytes", INT, ("message.max.bytes", _same), minimum=0),
        _topic(
            "message.timestamp.type", STR, ("log.message.timestamp.type", _same), choices=_TS_TYPES
        ),
        _topic("flush.messages", LONG, ("log.flush.interval.messages", _same), minimum=1),
        _topic(
            "flush.ms", LONG, ("log.flush.interval.ms", _same),
            ("log.flush.scheduler.interval.ms", _same), minimum=0,
        ),
        _topic("index.interval.bytes", INT, ("log.index.interval.bytes", _same), minimum=0),
        # The rest of Kafka 4.1's topic keys. See docs/configuration.md for the ones without effect here.
        _topic(
            "segment.jitter.ms", LONG, ("log.roll.jitter.ms", _same), ("log.roll.jitter.hours", _hours), minimum=0
        ),
        _topic("preallocate", BOOL, ("log.preallocate", _same)),
        _topic("unclean.leader.election.enable", BOOL, ("unclean.leader.election.enable", _same)),
        _topic("compression.gzip.level", INT, ("compression.gzip.level", _same), check=_gzip_level),
        _topic("compression.lz4.level", INT, ("compression.lz4.level", _same), minimum=1, maximum=17),
        _topic("compression.zstd.level", INT, ("compression.zstd.level", _same), minimum=-131072, maximum=22),
        _topic("message.downconversion.enable", BOOL, ("log.message.downconversion.enable", _same)),
        _topic(
            "leader.replication.throttled.replicas", ConfigType.LIST, default="", check=_throttled_replicas,
            doc="Replicas whose leader side replication is throttled (accepted; no effect on one broker).",
        ),
        _topic(
            "follower.replication.throttled.replicas", ConfigType.LIST, default="", check=_throttled_replicas,
            doc="Replicas whose follower side replication is throttled (accepted; no effect on one broker).",
        ),
        _topic("remote.storage.enable", BOOL, default=False, doc="Tiered storage: refused, it is not available."),
        _topic("remote.log.copy.disable", BOOL, default=False, doc="Tiered storage (accepted; no effect here)."),
        _topic("remote.log.delete.on.disable", BOOL, default=False, doc="Tiered storage (accepted; no effect here)."),
        _topic("local.retention.ms", LONG, ("log.local.retention.ms", _same), minimum=-2),
        _topic("local.retention.bytes", LONG, ("log.local.retention.bytes", _same), minimum=-2),
        _topic("delete.retention.ms", LONG, ("log.cleaner.delete.retention.ms", _same), minimum=0),
        _topic(
            "min.cleanable.dirty.ratio", DOUBLE, ("log.cleaner.min.cleanable.ratio", _same), minimum=0,
            maximum=1,
        ),
        _topic("min.compaction.lag.ms", LONG, ("log.cleaner.min.compaction.lag.ms", _same), minimum=0),
        _topic("max.compaction.lag.ms", LONG, ("log.cleaner.max.compaction.lag.ms", _same), minimum=1),
        _topic("file.delete.delay.ms", LONG, ("log.segment.delete.delay.ms", _same), minimum=0),
        _topic("min.insync.replicas", INT, ("min.insync.replicas", _same), minimum=1),
        _topic(
            "message.timestamp.before.max.ms", LONG, ("log.message.timestamp.before.max.ms", _same), minimum=0
        ),
        _topic(
            "message.timestamp.after.max.ms", LONG, ("log.message.timestamp.after.max.ms", _same), minimum=0
        ),
        _topic("compression.type", STR, ("compression.type", _same), choices=_COMPRESSION_TYPES),
    ]
}


# Dynamic broker configs (KIP-226) as Kafka 4.1's DynamicBrokerConfig classifies the keys logbus
# declares: settable by IncrementalAlterConfigs/AlterConfigs for one broker (resource name = its
# id) or for all (""); every other declared key is read-only. Keys logbus does not declare are
# custom configs, which Kafka stores too. TLS stores only per listener (listener.name.<l>.<key>).
LISTENER_ONLY_KEYS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.key.password", "ssl.truststore.type", "ssl.truststore.location",
})
PER_BROKER_KEYS = LISTENER_ONLY_KEYS | frozenset({
    "listeners", "advertised.listeners", "listener.security.protocol.map", "ssl.cipher.suites",
    "ssl.enabled.protocols", "ssl.client.auth", "ssl.endpoint.identification.algorithm",
    "sasl.enabled.mechanisms", "sasl.jaas.config", "connections.max.reauth.ms",
})
DYNAMIC_KEYS = PER_BROKER_KEYS | frozenset(
    topic_key.synonyms[0][0] for topic_key in TOPIC_KEYS.values() if topic_key.synonyms
) | frozenset({
    "log.cleaner.backoff.ms", "num.io.threads", "num.replica.fetchers", "max.connections",
    "max.connections.per.ip", "max.connection.creation.rate", "producer.id.expiration.ms",
    "transaction.partition.verification.enable",
})
# Kafka's brokerConfigSynonyms: keys that set one setting in other units, in precedence order.
_SYNONYM_GROUPS = (
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
)
_BROKER_SYNONYMS = {name: group for group in _SYNONYM_GROUPS for name in group} | {
    "log.flush.interval.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
}


def broker_synonyms(name: str) -> tuple[str, ...]:
    """The broker keys Kafka consults for `name`, in order (a listener key falls back to its base key)."""
    base = _declared_base(name)
    if base is not None:
        return (name, base)
    return _BROKER_SYNONYMS.get(name, (name,))


def declared_key(name: str) -> ConfigKey | None:
    """The declared broker key `name` is, or sets for one listener (listener.name.<l>[.<mechanism>].<key>)."""
    return BROKER_KEYS.get(name) or BROKER_KEYS.get(_declared_base(name) or "")


def _declared_base(name: str) -> str | None:
    """The key a listener-prefixed name sets: `<key>`, or for a SASL mechanism's `<mechanism>.<key>` its `<key>`."""
    base = listener_base_key(name)
    if base is None or base in BROKER_KEYS:
        return base
    return base.partition(".")[2] if base.partition(".")[2] in BROKER_KEYS else base


@dataclass(frozen=True, slots=True)
class GroupKey:
    """A group config (KIP-848) and the broker key that gives its default, if any."""

    key: ConfigKey
    broker_default: str | None


def _group(name: str, type_: ConfigType = INT, default: object = None, **kw: object) -> GroupKey:
    """A group key; its default is its broker key's (`group.<name>`) when one is declared."""
    broker_key = BROKER_KEYS.get(f"group.{name}")
    if broker_key is not None:
        return GroupKey(replace(broker_key, name=name, **kw), broker_key.name)
    return GroupKey(_key(name, type_, default, **kw), None)  # type: ignore[arg-type]


def _share_offset_reset(value: object) -> None:
    """latest, earliest or by_duration:<ISO-8601 duration> (Kafka's ShareGroupAutoOffsetReset)."""
    if value in ("latest", "earliest") or re.fullmatch(r"by_duration:P.+", str(value)):
        return
    raise ValueError("must be latest, earliest or by_duration:<ISO-8601 duration>")


GROUP_KEYS: dict[str, GroupKey] = {
    g.key.name: g
    for g in [
        _group("consumer.session.timeout.ms"),
        _group("consumer.heartbeat.interval.ms"),
        _group("share.session.timeout.ms"),
        _group("share.heartbeat.interval.ms"),
        _group("share.record.lock.duration.ms"),
        _group("share.auto.offset.reset", STR, "latest", check=_share_offset_reset,
               doc="Where a share group starts in a partition it has no state for."),
        _group("share.isolation.level", STR, "read_uncommitted", choices=("read_committed", "read_uncommitted"),
               doc="Whether a share group reads uncommitted transactional records."),
        _group("streams.session.timeout.ms"),
        _group("streams.heartbeat.interval.ms"),
        _group("streams.num.standby.replicas"),
    ]
}


def java_hash_order(names: list[str]) -> list[str]:
    """`names` in the order a java.util.HashMap filled with them in this order iterates them:
    Kafka lists DescribeConfigs entries so, and clients' tests compare the lists by position."""
    capacity, threshold = 16, 12
    while len(names) > threshold:
        capacity, threshold = capacity * 2, capacity * 3 // 2
    return sorted(names, key=lambda name: _java_spread_hash(name) & (capacity - 1))


def _java_spread_hash(name: str) -> int:
    """String.hashCode() with HashMap's spread (h ^ h >>> 16), on 32 bits."""
    units = name.encode("utf-16-be")
    value = 0
    for i in range(0, len(units), 2):
        value = (31 * value + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return value ^ (value >> 16)


def load_properties(path: str) -> dict[str, str]:
    """Read a Java-style .properties file (key=value, # comments)."""
    result: dict[str, str] = {}
    with open(path, encoding="utf-8") as handle:
        for raw in handle:
            line = raw.strip()
            if not line or line.startswith(("#", "!")):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                key, _, value = line.partition(":")
            result[key.strip()] = value.strip()
    return result


@dataclass(frozen=True, slots=True)
class ConfigValue:
    """One resolved config: its value, where it came from, and its text for DescribeConfigs."""

    name: str
    value: object
    text: str | None
    source: ConfigSource
    type: ConfigType
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...] = ()


class BrokerConfig:
    """The broker's config: defaults overlaid with server.properties and --set (static), and with
    the dynamic configs stored in the metadata store (the cluster-wide default, then this broker's
    own), which `set_dynamic` replaces at run time. Lookups take the first layer that has a key:
    this broker's dynamic config, the dynamic default, the static config, the default."""

    def __init__(self, overrides: Mapping[str, str] | None = None) -> None:
        self._overrides: dict[str, str] = {}
        self._values: dict[str, object] = {}
        self._per_broker: dict[str, str] = {}
        self._cluster_default: dict[str, str] = {}
        self._dynamic_values: dict[str, object] = {}
        for name, text in (overrides or {}).items():
            key = BROKER_KEYS.get(name)
            self._overrides[name] = text
            if key is not None:
                self._values[name] = key.parse(text)
            elif listener_base_key(name) in BROKER_KEYS:  # a bad per-listener value fails at start too
                replace(BROKER_KEYS[listener_base_key(name)], name=name).parse(text)

    def set_dynamic(self, per_broker: Mapping[str, str], cluster_default: Mapping[str, str]) -> None:
        """Replace the dynamic layers. A stored value that does not parse (written by another
        version, or by hand) is described but not used."""
        values: dict[str, object] = {}
        for layer in (cluster_default, per_broker):  # this broker's own wins
            for name, text in layer.items():
                if name in BROKER_KEYS:
                    with contextlib.suppress(ConfigError):
                        values[name] = BROKER_KEYS[name].parse(text)
        self._per_broker, self._cluster_default = dict(per_broker), dict(cluster_default)
        self._dynamic_values = values

    def dynamic(self, per_broker: bool) -> dict[str, str]:
        """This broker's dynamic configs (`per_broker`) or the cluster-wide default ones."""
        return dict(self._per_broker if per_broker else self._cluster_default)

    def __getitem__(self, name: str) -> object:
        if name in self._dynamic_values:
            return self._dynamic_values[name]
        if name in self._values:
            return self._values[name]
        key = BROKER_KEYS[name]
        return None if key.default is None else key.parse(key.default)

    def is_set(self, name: str) -> bool:
        return name in self._overrides or name in self._dynamic_values

    def unknown_keys(self) -> list[str]:
        return sorted(name for name in self._overrides if name not in BROKER_KEYS and not _listener_key(name))

    def text(self, name: str) -> str | None:
        """The text a key was set to, also a key not declared (e.g. listener.name.<name>.ssl.*)."""
        return next((layer[name] for _source, layer in self._layers()[:3] if name in layer), None)

    def for_listener(self, listener_name: str, name: str) -> object:
        """Key `name` for one listener: `listener.name.<listener lowercased>.<name>` when set, else `name`
        (Kafka's listener prefix)."""
        text = self.text(f"listener.name.{listener_name.lower()}.{name}")
        return self[name] if text is None else self.parse(name, text)

    @staticmethod
    def parse(name: str, text: str) -> object:
        """`text` as a value of the declared key `name` (ConfigError when it is not one)."""
        return BROKER_KEYS[name].parse(text)

    def _layers(self) -> list[tuple[ConfigSource, Mapping[str, str]]]:
        return [
            (ConfigSource.DYNAMIC_BROKER_CONFIG, self._per_broker),
            (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, self._cluster_default),
            (ConfigSource.STATIC_BROKER_CONFIG, self._overrides),
            (ConfigSource.DEFAULT_CONFIG, _DEFAULT_TEXTS),
        ]

    def synonyms(self, name: str) -> tuple[tuple[str, str | None, ConfigSource], ...]:
        """Kafka's synonyms of broker key `name` (ConfigHelper.configSynonyms): each layer in
        precedence order, each of the key's broker synonyms set there, the ones before the first
        entry for `name` itself dropped. So `log.retention.ms` unset with `log.retention.hours`
        at its default has none."""
        names = broker_synonyms(name)
        found = [(n, layer[n], source) for source, layer in self._layers() for n in names if n in layer]
        first = next((i for i, (n, _text, _source) in enumerate(found) if n == name), len(found))
        return tuple(found[first:])

    def describe(self, name: str) -> ConfigValue:
        """Broker key `name` (declared, listener-prefixed or custom) as DescribeConfigs lists it."""
        key = declared_key(name)
        config_type = ConfigType.UNKNOWN if key is None else key.type
        synonyms = self.synonyms(name)
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        text = next((layer[name] for _source, layer in self._layers() if name in layer), None)
        value = self[name] if name in BROKER_KEYS else text
        return ConfigValue(name, value, text, source, config_type, synonyms)

    def described_names(self) -> list[str]:
        """The keys DescribeConfigs lists for this broker, in Kafka's order: keys set that are not
        declared (custom and listener keys), then every declared key."""
        extra = [n for n in {**self._overrides, **self._cluster_default, **self._per_broker} if n not in BROKER_KEYS]
        return java_hash_order(extra) + java_hash_order(list(BROKER_KEYS))

    def topic_default(self, topic_key: TopicKey) -> ConfigValue:
        """The broker-side value of a topic config: the first synonym that is set, else default;
        its synonyms as Kafka lists them (those of the topic key's first broker synonym)."""
        key = topic_key.key
        if not topic_key.synonyms:
            value = key.parse(key.default or "")
            return ConfigValue(key.name, value, key.default, ConfigSource.DEFAULT_CONFIG, key.type)
        chosen = next(
            ((name, fn) for name, fn in topic_key.synonyms if self.is_set(name)), None
        ) or next(
            (name, fn) for name, fn in topic_key.synonyms if BROKER_KEYS[name].default is not None
        )
        name, convert = chosen
        value = convert(self[name])
        text = ",".join(value) if isinstance(value, tuple) else _text(value)
        synonyms = self.synonyms(topic_key.synonyms[0][0])
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        return ConfigValue(topic_key.key.name, value, text, source, topic_key.key.type, synonyms)

    def group_default(self, group_key: GroupKey) -> ConfigValue:
        """A group config's default: its broker key's value (with that key's synonyms), or its own."""
        key = group_key.key
        if group_key.broker_default is None:
            synonyms = () if key.default is None else ((key.name, key.default, ConfigSource.DEFAULT_CONFIG),)
            return ConfigValue(key.name, key.parse(key.default or ""), key.default, ConfigSource.DEFAULT_CONFIG,
                               key.type, synonyms)
        broker = self.describe(group_key.broker_default)
        return replace(broker, name=key.name, type=key.type)


_DEFAULT_TEXTS = {name: key.default for name, key in BROKER_KEYS.items() if key.default is not None}


def listener_base_key(name: str) -> str | None:
    """Kafka's per-listener prefix: `listener.name.<listener>.<key>` sets `<key>` for one listener;
    None for a name without the prefix."""
    parts = name.split(".", 3)
    if len(parts) != 4 or parts[:2] != ["listener", "name"]:
        return None
    return parts[3]


def _listener_key(name: str) -> bool:
    base = listener_base_key(name)
    return base is not None and (base in BROKER_KEYS or base.partition(".")[2] == "sasl.jaas.config")


def _text(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def validate_topic_configs(
    configs: Mapping[str, str | None], broker: BrokerConfig | None = None
) -> dict[str, str]:
    """Check names and values of topic overrides, alone and together with the broker's defaults
    (Kafka's LogConfig.validate); returns them (None values dropped)."""
    result = {}
    for name, text in configs.items():
        topic_key = TOPIC_KEYS.get(name)
        if topic_key is None:
            raise ConfigError(f"Unknown topic config name: {name}")
        if text is None:
            continue
        topic_key.key.parse(text)
        result[name] = text
    effective = {c.name: c.value for c in describe_topic_configs(broker or BrokerConfig(), result)}
    _check_together(effective)
    return result


def _check_together(effective: Mapping[str, object]) -> None:
    """Kafka's checks across keys, on the effective values. Tiered storage is never enabled on this
    broker (as a Kafka broker with remote.log.storage.system.enable=false), so a topic cannot ask for it."""
    min_lag, max_lag = effective["min.compaction.lag.ms"], effective["max.compaction.lag.ms"]
    if min_lag > max_lag:  # type: ignore[operator]
        raise ConfigError(
            f"conflict topic config setting min.compaction.lag.ms ({min_lag}) > max.compaction.lag.ms ({max_lag})"
        )
    if effective["remote.storage.enable"]:
        raise ConfigError(
            "Tiered Storage functionality is disabled in the broker. "
            "Topic cannot be configured with remote log storage."
        )


def describe_topic_configs(broker: BrokerConfig, overrides: Mapping[str, str]) -> list[ConfigValue]:
    """Every topic config with its effective value and source, for DescribeConfigs (in Kafka's order)."""
    return _described(_TOPIC_ORDER, TOPIC_KEYS, broker.topic_default, overrides, ConfigSource.DYNAMIC_TOPIC_CONFIG)


def describe_group_configs(broker: BrokerConfig, overrides: Mapping[str, str]) -> list[ConfigValue]:
    """Every group config with its value and source (DYNAMIC_GROUP_CONFIG when the group sets it),
    in Kafka's order (ConfigHelper.createGroupConfigEntry)."""
    return _described(_GROUP_ORDER, GROUP_KEYS, broker.group_default, overrides, ConfigSource.DYNAMIC_GROUP_CONFIG)


def _described(order: list[str], keys: Mapping[str, Any], default_of: Callable[[Any], ConfigValue],
               overrides: Mapping[str, str], source: ConfigSource) -> list[ConfigValue]:
    """Each config of `order`: its override (of `source`, the broker's default its first synonym
    after the override itself), or the broker's default."""
    described = []
    for name in order:
        default = default_of(keys[name])
        if name in overrides:
            text = overrides[name]
            described.append(replace(default, value=keys[name].key.parse(text), text=text, source=source,
                                     synonyms=((name, text, source), *default.synonyms)))
        else:
            described.append(default)
    return described


def validate_group_configs(configs: Mapping[str, str], broker: BrokerConfig) -> dict[str, str]:
    """Kafka's GroupConfig.validate: known names, values that parse, each timeout within the
    broker's bounds (group.<kind>.min/max.<setting>), a session longer than its heartbeat."""
    for name, text in configs.items():
        if name not in GROUP_KEYS:
            raise ConfigError(f"Unknown group config name: {name}")
        GROUP_KEYS[name].key.parse(text)
    effective = {c.name: c.value for c in describe_group_configs(broker, configs)}
    for name, group_key in GROUP_KEYS.items():
        _check_group_bounds(name, group_key, effective[name], broker)
    for kind in ("consumer", "share", "streams"):
        if effective[f"{kind}.session.timeout.ms"] <= effective[f"{kind}.heartbeat.interval.ms"]:  # type: ignore[operator]
            raise ConfigError(f"{kind}.session.timeout.ms must be greater than {kind}.heartbeat.interval.ms")
    return dict(configs)


def _check_group_bounds(name: str, group_key: GroupKey, value: object, broker: BrokerConfig) -> None:
    broker_key = group_key.broker_default
    if broker_key is None:
        return
    kind, _, setting = broker_key.removeprefix("group.").partition(".")
    if setting == "num.standby.replicas":
        low_key, high_key = None, f"group.{kind}.max.standby.replicas"
    else:
        low_key, high_key = f"group.{kind}.min.{setting}", f"group.{kind}.max.{setting}"
    if low_key is not None and value < broker[low_key]:  # type: ignore[operator]
        raise ConfigError(f"{name} must be greater than or equal to {low_key}")
    if value > broker[high_key]:  # type: ignore[operator]
        raise ConfigError(f"{name} must be less than or equal to {high_key}")


_TOPIC_ORDER = java_hash_order(list(TOPIC_KEYS))
_GROUP_ORDER = java_hash_order(list(GROUP_KEYS))

@dataclass(frozen=True, slots=True)
class LogConfig:
    """A partition log's effective, typed settings (what storage reads)."""

    segment_bytes: int
    segment_ms: int
    segment_index_bytes: int
    retention_ms: int
    retention_bytes: int
    flush_messages: int
    flush_ms: int
    max_message_bytes: int
    index_interval_bytes: int
    cleanup_policy: tuple[str, ...]
    message_timestamp_type: str
    delete_retention_ms: int
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    file_delete_delay_ms: int
    min_insync_replicas: int
    message_timestamp_before_max_ms: int
    message_timestamp_after_max_ms: int
    compression_type: str
    compression_gzip_level: int
    compression_lz4_level: int
    compression_zstd_level: int

    @property
    def compression_level(self) -> int | None:
        """The level compression.type's codec has here (KIP-390); None for codecs without one."""
        levels = {"gzip": self.compression_gzip_level, "lz4": self.compression_lz4_level,
                  "zstd": self.compression_zstd_level}
        return levels.get(self.compression_type)

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def max_segment_ms(self) -> int:
        """segment.ms, capped by max.compaction.lag.ms on a compacted topic (Kafka's roll rule)."""
        return min(self.segment_ms, self.max_compaction_lag_ms) if self.compact else self.segment_ms


_LOG_CONFIG_FIELDS = frozenset(LogConfig.__dataclass_fields__)


def log_config(broker: BrokerConfig, overrides: Mapping[str, str] | None = None) -> LogConfig:
    """The typed settings storage reads; topic keys that storage does not use are left out."""
    values = {c.name.replace(".", "_"): c.value for c in describe_topic_configs(broker, overrides or {})}
    return LogConfig(**{field: value for field, value in values.items() if field in _LOG_CONFIG_FIELDS})
