"""Listeners as Kafka configures them: `listeners`, `listener.security.protocol.map`,
`advertised.listeners` and `inter.broker.listener.name` (or `security.inter.broker.protocol`).

Sans-I/O: these functions parse and check the keys together and work out what each listener
advertises once it is bound; the broker binds the sockets. Errors are ConfigError with Kafka's
wording, so that `logbus serve` refuses a bad config before binding anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from ..config import BrokerConfig, ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)
WILDCARD_HOSTS = ("", "0.0.0.0", "::")

# Kafka's CoreUtils.listenerListToEndPoints: NAME://host:port, an IPv6 host in brackets.
_ENDPOINT = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


@dataclass(frozen=True, slots=True)
class ListenerEndpoint:
    """A named listener's address and security protocol (bound, or as advertised)."""

    name: str
    security_protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.security_protocol in TLS_PROTOCOLS

    def at(self, host: str, port: int) -> ListenerEndpoint:
        return replace(self, host=host, port=port)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ListenerSettings:
    """What the listener keys say together: the listeners to bind, what each advertises, and
    which listener brokers use to reach each other."""

    listeners: tuple[ListenerEndpoint, ...]
    advertised: Mapping[str, ListenerEndpoint]  # by listener name; listeners not named advertise their address
    inter_broker_listener: str

    @classmethod
    def plaintext(cls, host: str, port: int) -> ListenerSettings:
        """One PLAINTEXT listener, also the inter-broker one (`logbus serve --host/--port`)."""
        return cls((ListenerEndpoint("PLAINTEXT", "PLAINTEXT", host, port),), {}, "PLAINTEXT")

    def advertise(self, bound: Iterable[ListenerEndpoint], local_host: str) -> tuple[ListenerEndpoint, ...]:
        """What Metadata gives clients for each bound listener: its `advertised.listeners` entry,
        where an empty host or port 0 means the bound one; a wildcard bind advertises `local_host`."""
        result = []
        for endpoint in bound:
            wanted = self.advertised.get(endpoint.name)
            host = wanted.host if wanted is not None and wanted.host else endpoint.host
            port = wanted.port if wanted is not None and wanted.port else endpoint.port
            result.append(endpoint.at(local_host if host in WILDCARD_HOSTS else host, port))
        return tuple(result)


def normalised(name: str) -> str:
    """Listener names are case-insensitive (Kafka's ListenerName.normalised)."""
    return name.strip().upper()


def parse_protocol_map(text: str) -> dict[str, str]:
    """`listener.security.protocol.map`: NAME:PROTOCOL,... with names and protocols case-insensitive."""
    protocols: dict[str, str] = {}
    for entry in (item.strip() for item in text.split(",")):
        if not entry:
            continue
        name, sep, protocol = entry.rpartition(":")
        if not sep or not name.strip():
            raise ConfigError(f"Invalid value {text} for configuration listener.security.protocol.map: "
                              f"Map entry should be of form <key>:<value>, got {entry}")
        name, protocol = normalised(name), protocol.strip().upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"Invalid value {text} for configuration listener.security.protocol.map: "
                              f"unknown security protocol {protocol} (one of {', '.join(SECURITY_PROTOCOLS)})")
        if name in protocols:
            raise ConfigError(f"Invalid value {text} for configuration listener.security.protocol.map: "
                              f"Duplicate listener name {name}")
        protocols[name] = protocol
    return protocols


def parse_endpoints(key: str, text: str, protocols: Mapping[str, str]) -> tuple[ListenerEndpoint, ...]:
    """A `listeners`-style list; every name must be in the protocol map and appear once."""
    endpoints = []
    for entry in (item.strip() for item in text.split(",")):
        if not entry:
            continue
        match = _ENDPOINT.match(entry)
        if match is None:
            raise ConfigError(f"Unable to parse {entry} to a broker endpoint")
        name = normalised(match.group(1))
        if name not in protocols:
            raise ConfigError(f"No security protocol defined for listener {name}")
        port = int(match.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError(f"Invalid port {port} in {key}: {entry}")
        endpoints.append(ListenerEndpoint(name, protocols[name], match.group(2), port))
    names = [e.name for e in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError(f"Each listener must have a different name, {key}: {text}")
    return tuple(endpoints)


def listener_settings(config: BrokerConfig, shorthand: tuple[str, int] | None = None,
                      default: tuple[str, int] = ("127.0.0.1", 9092)) -> ListenerSettings:
    """The listener keys of `config` (a BrokerConfig), checked together as Kafka does.

    `shorthand` (`logbus serve --host/--port`) replaces `listeners` with one PLAINTEXT listener;
    without either, the broker listens on PLAINTEXT://`default`.
    """
    protocols = parse_protocol_map(str(config["listener.security.protocol.map"]))
    if shorthand is not None:
        text = str(ListenerEndpoint("PLAINTEXT", "PLAINTEXT", *shorthand))
    else:
        text = str(config["listeners"] or ListenerEndpoint("PLAINTEXT", "PLAINTEXT", *default))
    listeners = parse_endpoints("listeners", text, protocols)
    if not listeners:
        raise ConfigError("listeners must name at least one listener")
    _check_distinct_ports(listeners, text)
    advertised = parse_endpoints("advertised.listeners", str(config["advertised.listeners"] or ""), protocols)
    _check_advertised(advertised, listeners)
    inter_broker = _inter_broker_listener(config, listeners)
    return ListenerSettings(listeners, {e.name: e for e in advertised}, inter_broker)


def _check_distinct_ports(listeners: tuple[ListenerEndpoint, ...], text: str) -> None:
    ports = [e.port for e in listeners if e.port]
    if len(set(ports)) != len(ports):
        raise ConfigError(f"Each listener must have a different port, listeners: {text}")


def _check_advertised(advertised: tuple[ListenerEndpoint, ...], listeners: tuple[ListenerEndpoint, ...]) -> None:
    names = {e.name for e in listeners}
    unknown = [e.name for e in advertised if e.name not in names]
    if unknown:
        raise ConfigError(
            "advertised.listeners listener names must be equal to or a subset of the ones defined in listeners. "
            f"Found {','.join(unknown)}. The valid options based on the current configuration are "
            f"{','.join(e.name for e in listeners)}")
    if any(e.host == "0.0.0.0" for e in advertised):
        raise ConfigError("advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. "
                          "Use a routable IP address.")


def _inter_broker_listener(config: BrokerConfig, listeners: tuple[ListenerEndpoint, ...]) -> str:
    """`inter.broker.listener.name`, else the listener named after `security.inter.broker.protocol`."""
    explicit = config["inter.broker.listener.name"]
    if explicit and config.is_set("security.inter.broker.protocol"):
        raise ConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.")
    if explicit:
        name = normalised(str(explicit))
    else:
        name = str(config["security.inter.broker.protocol"]).strip().upper()
        if name not in SECURITY_PROTOCOLS:
            raise ConfigError(f"Invalid value {name} for configuration security.inter.broker.protocol: "
                              f"one of {', '.join(SECURITY_PROTOCOLS)}")
    if name not in {e.name for e in listeners}:
        raise ConfigError(
            "inter.broker.listener.name must be a listener name defined in advertised.listeners. "
            f"The valid options based on currently configured listeners are {','.join(e.name for e in listeners)}")
    return name
