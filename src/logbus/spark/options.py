"""The connector's options, named and defaulted as Spark's Kafka source names them.

Offsets travel as `{topic: {partition: offset}}` with the partition as a string key (JSON has
no integer keys), topics sorted by name and partitions by number: Spark compares offsets as
JSON strings, so the same offsets must always serialise the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..client.client import EARLIEST, LATEST, READ_COMMITTED, READ_UNCOMMITTED
from ..config import ConfigError
from ..security.sasl_client import parse_jaas

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$")
_DURATION_UNITS_S = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, None: 0.001}

DATA_LOSS_HINT = (
    'If you want your streaming query to skip such records instead, set the source option "failOnDataLoss" '
    'to "false".'
)


class OptionError(ValueError):
    """An option is missing, contradicts another, or does not parse."""


@dataclass(frozen=True)
class Subscription:
    """Which topics (or partitions) a query reads: exactly one of the three Kafka ways."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def select(self, partitions: Mapping[str, list[int]]) -> list[TopicPartition]:
        """The partitions to read, out of the cluster's `{topic: [partition, ...]}`, sorted."""
        if self.assigned:
            return sorted(self.assigned)
        if self.pattern is not None:
            regex = re.compile(self.pattern)
            names = [name for name in partitions if regex.fullmatch(name)]
        else:
            names = [name for name in self.topics if name in partitions]
        return sorted((name, p) for name in names for p in partitions[name])

    def topic_names(self) -> list[str] | None:
        """Topics to ask Metadata about (None: all, for a pattern)."""
        if self.pattern is not None:
            return None
        return sorted({t for t, _ in self.assigned} if self.assigned else set(self.topics))


@dataclass(frozen=True)
class OffsetSpec:
    """earliest, latest, explicit offsets per partition, or timestamps per partition."""

    default: int  # EARLIEST or LATEST, for partitions not named
    offsets: Mapping[TopicPartition, int]  # explicit offsets (-2 earliest, -1 latest)
    timestamps: Mapping[TopicPartition, int] | None = None  # by timestamp, when given
    global_timestamp: int | None = None  # startingTimestamp / endingTimestamp


def bootstrap_servers(options: Mapping[str, str]) -> str:
    for name in ("logbus.bootstrap.servers", "kafka.bootstrap.servers"):
        if options.get(name):
            return options[name]
    raise OptionError('option "logbus.bootstrap.servers" (or "kafka.bootstrap.servers") must be set')


def subscription(options: Mapping[str, str]) -> Subscription:
    given = [name for name in ("subscribe", "subscribepattern", "assign") if options.get(name)]
    if len(given) != 1:
        raise OptionError('exactly one of the options "subscribe", "subscribePattern", "assign" must be set')
    if options.get("subscribe"):
        topics = tuple(t.strip() for t in options["subscribe"].split(",") if t.strip())
        if not topics:
            raise OptionError('option "subscribe" names no topic')
        return Subscription(topics=topics)
    if options.get("subscribePattern"):
        return Subscription(pattern=options["subscribePattern"])
    assigned = _json_object(options["assign"], "assign")
    return Subscription(assigned=tuple(
        (topic, int(p)) for topic, parts in assigned.items() for p in parts
    ))


def offset_spec(options: Mapping[str, str], kind: str, default: int) -> OffsetSpec:
    """`kind` is "starting" or "ending"; Spark's precedence: timestamp > byTimestamp > offsets."""
    if options.get(f"{kind}Timestamp"):
        return OffsetSpec(default, {}, global_timestamp=int(options[f"{kind}Timestamp"]))
    if options.get(f"{kind}OffsetsByTimestamp"):
        return OffsetSpec(default, {}, timestamps=_per_partition(options[f"{kind}OffsetsByTimestamp"], kind))
    text = (options.get(f"{kind}Offsets") or "").strip()
    if not text:
        return OffsetSpec(default, {})
    if text.lower() == "earliest":
        if kind == "ending":
            raise OptionError('"endingOffsets" cannot be "earliest"')
        return OffsetSpec(EARLIEST, {})
    if text.lower() == "latest":
        return OffsetSpec(LATEST, {})
    return OffsetSpec(default, _per_partition(text, kind))


def _per_partition(text: str, kind: str) -> dict[TopicPartition, int]:
    parsed = _json_object(text, f"{kind}Offsets")
    try:
        return {(topic, int(p)): int(v) for topic, parts in parsed.items() for p, v in parts.items()}
    except (AttributeError, TypeError, ValueError):
        raise OptionError(f'{kind} offsets must look like {{"topic": {{"0": 23}}}}, got {text}') from None


def _json_object(text: str, name: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f'option "{name}" is not JSON: {exc}') from None
    if not isinstance(value, dict):
        raise OptionError(f'option "{name}" must be a JSON object')
    return value


def flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise OptionError(f'option "{name}" must be true or false, got {value!r}')
    return value.strip().lower() == "true"


def positive_int(options: Mapping[str, str], name: str) -> int | None:
    value = options.get(name)
    if value is None:
        return None
    number = int(value)
    if number <= 0:
        raise OptionError(f'option "{name}" must be positive, got {value}')
    return number


def duration_s(options: Mapping[str, str], name: str, default: str) -> float:
    """Spark-style durations: "15m", "30s", "500ms", plain numbers in ms."""
    text = options.get(name) or default
    match = _DURATION.match(text)
    if not match:
        raise OptionError(f'option "{name}" must be a duration like 15m or 30s, got {text!r}')
    return int(match.group(1)) * _DURATION_UNITS_S[match.group(2)]


def isolation_level(options: Mapping[str, str]) -> int:
    """`isolation.level` (alias `kafka.isolation.level`): read_uncommitted (default) or read_committed."""
    text = (options.get("isolation.level") or options.get("kafka.isolation.level") or "read_uncommitted").strip()
    levels = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}
    if text.lower() not in levels:
        raise OptionError(f'option "isolation.level" must be read_uncommitted or read_committed, got {text!r}')
    return levels[text.lower()]


# The sink's own options (logbus.spark.exactly_once), not for the producer.
EXACTLY_ONCE = "logbus.exactlyOnce"
TRANSACTIONAL_ID_PREFIX = "logbus.transactional.id.prefix"
TRANSACTION_TIMEOUT_MS = "kafka.transaction.timeout.ms"
_SINK_OPTIONS = frozenset(name.lower() for name in (EXACTLY_ONCE, TRANSACTIONAL_ID_PREFIX))
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000  # Kafka's default transaction.max.timeout.ms: the longest a broker allows


@dataclass(frozen=True)
class ExactlyOnce:
    """How a streaming write uses transactions (see logbus.spark.exactly_once)."""

    prefix: str | None  # None: "spark-<query id>", known on the executors only
    transaction_timeout_ms: int


def exactly_once(options: Mapping[str, str]) -> ExactlyOnce | None:
    """`logbus.exactlyOnce` (default true), its transactional id prefix and transaction timeout;
    None when it is off."""
    if not flag(options, EXACTLY_ONCE, True):
        return None
    prefix = (options.get(TRANSACTIONAL_ID_PREFIX) or "").strip() or None
    timeout_ms = positive_int(options, TRANSACTION_TIMEOUT_MS) or DEFAULT_TRANSACTION_TIMEOUT_MS
    return ExactlyOnce(prefix, timeout_ms)


def client_config(options: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings from the options prefixed `kafka.` or `logbus.` (the prefix stripped,
    Java client names translated: `librdkafka_names`), as Spark's Kafka sink hands them to its
    producer (except the sink's own: `logbus.exactlyOnce`, `logbus.transactional.id.prefix`).
    The at-least-once sink's producer takes them all; logbus's own client (the source, the
    exactly-once sink) reads its security settings from them."""
    config = {}
    for name, value in options.items():
        if name.lower() in _SINK_OPTIONS:
            continue
        for prefix in ("kafka.", "logbus."):
            if name.lower().startswith(prefix):
                config[name[len(prefix):]] = value
    config = librdkafka_names(config)
    config["bootstrap.servers"] = bootstrap_servers(options)
    return config


# Spark users bring the Java client's security settings; librdkafka refuses names it does not know.
_JAAS_CONFIG = "sasl.jaas.config"
_ENDPOINT_CHECK = "ssl.endpoint.identification.algorithm"
_PEM_STORES = {  # Java's store -> the librdkafka settings that name its PEM file
    "truststore": ("ssl.ca.location",),
    "keystore": ("ssl.certificate.location", "ssl.key.location"),  # one file: the key and its certificate chain
}
_JAVA_ONLY = frozenset({_JAAS_CONFIG, "ssl.truststore.location", "ssl.truststore.type", "ssl.keystore.location",
                        "ssl.keystore.type"})


def librdkafka_names(settings: Mapping[str, str]) -> dict[str, str]:
    """`settings` with the Java client's security settings in librdkafka's names: the login of
    `sasl.jaas.config`, PEM trust and key stores, and `""` for no host name check. Where both
    name the same thing, the librdkafka setting wins. OptionError for what cannot be translated."""
    native = {name: value for name, value in settings.items() if name not in _JAVA_ONLY}
    if _ENDPOINT_CHECK in native and not native[_ENDPOINT_CHECK].strip():
        native[_ENDPOINT_CHECK] = "none"  # Java's "" (no check) is librdkafka's "none"
    translated = _jaas_login(settings)
    for store, names in _PEM_STORES.items():
        translated.update(_pem_store(settings, store, names))
    return {**translated, **native}


def _jaas_login(settings: Mapping[str, str]) -> dict[str, str]:
    """`sasl.username` and `sasl.password` from a PlainLoginModule or ScramLoginModule line."""
    if not settings.get(_JAAS_CONFIG):
        return {}
    mechanism = settings.get("sasl.mechanism", "GSSAPI").strip().upper()  # GSSAPI: the default of both clients
    try:
        username, password = parse_jaas(settings[_JAAS_CONFIG], mechanism)
    except ConfigError as exc:  # its messages never quote the line, which holds the password
        raise OptionError(f'option "kafka.{_JAAS_CONFIG}" (sasl.mechanism {mechanism}) is not usable: {exc}') from None
    return {"sasl.username": username, "sasl.password": password}


def _pem_store(settings: Mapping[str, str], store: str, names: tuple[str, ...]) -> dict[str, str]:
    """`ssl.<store>.location` as the librdkafka settings `names`, for a PEM store only: Python's ssl
    reads neither JKS (Java's default type) nor PKCS12."""
    location = settings.get(f"ssl.{store}.location")
    if not location:
        return {}
    kind = settings.get(f"ssl.{store}.type", "JKS (the default)")
    if kind.strip().upper() != "PEM":
        raise OptionError(f'option "kafka.ssl.{store}.type" is {kind}: only PEM {store}s are supported, as Python\'s '
                          f'ssl cannot read JKS or PKCS12 (convert the {store} to PEM, or set '
                          f'{" and ".join(f"kafka.{name}" for name in names)})')
    return dict.fromkeys(names, location)


def to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    """Offsets as the checkpoint stores them: topics sorted, then partitions by number."""
    result: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        result.setdefault(topic, {})[str(partition)] = offsets[(topic, partition)]
    return result


def from_json(offsets: Mapping[str, Mapping[str, int]]) -> Offsets:
    return {(topic, int(p)): int(v) for topic, parts in offsets.items() for p, v in parts.items()}
