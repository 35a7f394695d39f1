"""Shared pieces of the client commands (`topics`, `produce`, `consume`).

Errors a user can cause or fix (unknown topic, broker down, bad option) are raised as
`CliError` and printed by `main` as one line, without a traceback.
"""

from __future__ import annotations

import argparse
from typing import Any

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TIMEOUT_S = 10.0

EXIT_FAILURE = 1
EXIT_USAGE = 2


class CliError(Exception):
    """A failure to report as `logbus: <message>` with `exit_code`."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def add_connection_options(parser: argparse.ArgumentParser, inherited: bool = False) -> None:
    """`inherited`: on a sub-command's parser, whose parent has them too; given after the
    sub-command they win, left out they keep the parent's value."""
    parser.add_argument(
        "--bootstrap-server", default=argparse.SUPPRESS if inherited else DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
        help=f"broker to connect to (default {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--timeout", type=positive_float, default=argparse.SUPPRESS if inherited else DEFAULT_TIMEOUT_S,
        metavar="SECONDS", help=f"how long to wait for the broker before giving up (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--command-config", default=argparse.SUPPRESS if inherited else None, metavar="FILE",
        help="a properties file of librdkafka client settings (security.protocol, sasl.mechanism, sasl.username, "
             "sasl.password, ssl.ca.location, ...) for every client the command creates",
    )


def positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def parse_key_values(items: list[str], option: str) -> dict[str, str]:
    """`["k=v", ...]` -> `{"k": "v"}`; a missing `=` is a usage error."""
    from ..client import admin  # here: `main` imports this module for CliError alone (`logbus serve`)

    try:
        return admin.parse_key_values(items, option)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def client_config(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """librdkafka settings for a client of `--bootstrap-server`, with `--command-config`'s settings.

    librdkafka's own log lines are silenced: failures reach the user as `CliError`s instead.
    """
    command_config = getattr(args, "command_config", None)
    settings = read_properties(command_config) if command_config else {}
    return {"bootstrap.servers": args.bootstrap_server, "log_level": 0, **settings, **extra}


def protocol_client(args: argparse.Namespace) -> Any:
    """logbus's own blocking Kafka client (`logbus.client`, for the requests confluent-kafka's
    AdminClient lacks) for `--bootstrap-server`, secured as `--command-config` says."""
    from ..client.client import Client
    from ..client.errors import KafkaError
    from ..client.security import ClientSecurity

    try:
        return Client(args.bootstrap_server, args.timeout, ClientSecurity.from_settings(client_config(args)))
    except KafkaError as exc:
        raise CliError(f"--command-config: {exc}", EXIT_USAGE) from None


def read_properties(path: str) -> dict[str, str]:
    """A Java-style properties file (`key=value` or `key: value`; `#` and `!` start comments), as
    Kafka's tools read `--command-config`."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}", EXIT_USAGE) from None
    settings: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text[0] in "#!":
            continue
        separator = min((i for i in (text.find("="), text.find(":")) if i > 0), default=-1)
        if separator < 0:
            raise CliError(f"{path}:{number}: expected KEY=VALUE, got {text!r}", EXIT_USAGE)
        settings[text[:separator].strip()] = text[separator + 1:].strip()
    return settings


def import_confluent_kafka() -> Any:
    try:
        import confluent_kafka
        import confluent_kafka.admin
    except ImportError:
        raise CliError("this command needs confluent-kafka: pip install 'logbus[cli]'") from None
    return confluent_kafka


def describe_kafka_error(error: Any) -> str:
    """A `KafkaError`'s message, without librdkafka's `KafkaError{code=...}` wrapping."""
    return error.str() if hasattr(error, "str") else str(error)


def unreachable(args: argparse.Namespace) -> CliError:
    return CliError(f"cannot reach a broker at {args.bootstrap_server} within {args.timeout:g}s")


def fetch_topic_metadata(client: Any, args: argparse.Namespace, topic: str) -> Any:
    """The `TopicMetadata` of an existing `topic`; a clear `CliError` if it or the broker is missing.

    Asking a producer for metadata may auto-create the topic (as Kafka's console producer does)
    when the broker allows it; a consumer or admin client never does.
    """
    kafka = import_confluent_kafka()
    try:
        client.list_topics(timeout=args.timeout)  # reachability first: then a topic error is about the topic
        metadata = client.list_topics(topic, timeout=args.timeout)
    except kafka.KafkaException as exc:
        raise topic_error(exc.args[0], args, topic) from None
    found = metadata.topics.get(topic)
    if found is None:
        raise CliError(f"topic '{topic}' does not exist")
    if found.error is not None:
        raise topic_error(found.error, args, topic)
    return found


def topic_error(error: Any, args: argparse.Namespace, topic: str) -> CliError:
    """Turn a `KafkaError` about `topic` into the message a user needs."""
    kafka = import_confluent_kafka()
    code = error.code() if hasattr(error, "code") else None
    if code in (kafka.KafkaError._TRANSPORT, kafka.KafkaError._TIMED_OUT, kafka.KafkaError._ALL_BROKERS_DOWN):
        return unreachable(args)
    if code in (kafka.KafkaError.UNKNOWN_TOPIC_OR_PART, kafka.KafkaError._UNKNOWN_TOPIC):
        return CliError(f"topic '{topic}' does not exist")
    return CliError(f"topic '{topic}': {describe_kafka_error(error)}")
