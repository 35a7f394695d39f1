"""A broker logging in to another broker's SASL listener (the inter-broker listener).

Configured as Kafka configures it: `sasl.mechanism.inter.broker.protocol` names the mechanism
(PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; Kafka's default, GSSAPI, is not offered) and the JAAS
line `listener.name.<listener>.<mechanism>.sasl.jaas.config` (or `sasl.jaas.config`) gives the
user, e.g. `org.apache.kafka.common.security.scram.ScramLoginModule required username="broker"
password="...";`. The user is an ordinary SCRAM user of the cluster (`logbus users`).

Fresh connections of replica fetchers and broker clients run `SaslLogin.authenticate` (SaslHandshake
v1, then SaslAuthenticate v2 tokens) before their first request; a refusal is a ConnectionError,
retried as any failed connection is. The same login (`SaslLogin.steps`) serves the blocking client
of the CLI, the console and Spark (`spark/client.py`), built from librdkafka-style settings.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import scramp
from kio.schema.errors import ErrorCode

from ..config import BrokerConfig, ConfigError
from ..protocol.codec import encode, make, request_class, response_class
from ..security.listeners import ListenerSettings
from ..security.sasl import PLAIN
from ..security.sasl_session import SASL_AUTHENTICATE, SASL_HANDSHAKE, SASL_PROTOCOLS
from .broker_client import decode_response
from .frame_stream import FrameStream

LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": (PLAIN,),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}
_JAAS = re.compile(r'\s*(?P<module>[\w.$]+)\s+required(?P<options>(?:\s+\w+\s*=\s*"[^"]*")*)\s*;\s*')
_OPTION = re.compile(r'(\w+)\s*=\s*"([^"]*)"')
MAX_TOKEN_FRAME = 1 << 16  # a SASL answer is a few hundred bytes


class SaslLoginError(ConnectionError):
    """The other broker refused this broker's login."""


@dataclass(frozen=True, slots=True)
class SaslLogin:
    mechanism: str
    username: str
    password: str = ""  # never shown: see __repr__

    def __repr__(self) -> str:
        return f"SaslLogin({self.mechanism}, {self.username})"

    @classmethod
    def for_inter_broker_listener(cls, config: BrokerConfig, listeners: ListenerSettings) -> SaslLogin | None:
        """The login for the inter-broker listener; None when it has no SASL. ConfigError when
        the mechanism or the JAAS line is missing or not usable, as Kafka refuses to start."""
        endpoint = next(e for e in listeners.listeners if e.name == listeners.inter_broker_listener)
        if endpoint.security_protocol not in SASL_PROTOCOLS:
            return None
        mechanism = config["sasl.mechanism.inter.broker.protocol"]
        if mechanism not in config.for_listener(endpoint.name, "sasl.enabled.mechanisms"):  # only logbus's ones
            raise ConfigError("sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms when "
                              f"SASL is used for inter-broker communication (it is {mechanism}; GSSAPI is not offered)")
        key = f"listener.name.{endpoint.name.lower()}.{mechanism.lower()}.sasl.jaas.config"
        jaas = config.text(key) or config["sasl.jaas.config"]
        if not jaas:
            raise ConfigError(f"the inter-broker listener {endpoint.name} uses {endpoint.security_protocol}: set "
                              f"{key} (or sasl.jaas.config) to the broker's login")
        username, password = parse_jaas(jaas, mechanism)
        return cls(mechanism, username, password)

    def steps(self) -> Generator[tuple[int, int, dict[str, object]], Any, None]:
        """The login, sans I/O: each request as (api key, version, fields), sent by the caller,
        whose response goes back in; SaslLoginError when refused. The event loop's connections
        (`authenticate`) and blocking sockets (`spark/client.py`) drive the same steps."""
        handshake = yield SASL_HANDSHAKE, 1, {"mechanism": self.mechanism}
        if handshake.error_code != ErrorCode.none:
            raise SaslLoginError(f"{self.mechanism} refused ({handshake.error_code.name}); the broker offers "
                                 f"{', '.join(handshake.mechanisms)}")
        if self.mechanism == PLAIN:
            yield from _token(f"\0{self.username}\0{self.password}".encode())
            return
        client = scramp.ScramClient([self.mechanism], _sasl_name(self.username), self.password)
        try:
            client.set_server_first((yield from _token(client.get_client_first().encode())).decode())
            client.set_server_final((yield from _token(client.get_client_final().encode())).decode())
        except (scramp.ScramException, UnicodeDecodeError) as exc:
            raise SaslLoginError(f"the broker's SCRAM answer does not verify: {exc}") from None

    async def authenticate(self, stream: FrameStream, client_id: str) -> None:
        """Log in on a fresh connection; SaslLoginError when refused, ConnectionError when cut."""
        exchange = _Exchange(stream, client_id)
        steps = self.steps()
        request = next(steps)
        with stream.frames_at_most(MAX_TOKEN_FRAME):
            while True:
                response = await exchange.call(*request)
                try:
                    request = steps.send(response)
                except StopIteration:
                    return


def _token(token: bytes) -> Generator[tuple[int, int, dict[str, object]], Any, bytes]:
    answer = yield SASL_AUTHENTICATE, 2, {"auth_bytes": token}
    if answer.error_code != ErrorCode.none:
        raise SaslLoginError(f"login refused: {answer.error_message or answer.error_code.name}")
    return answer.auth_bytes


def parse_jaas(text: str, mechanism: str) -> tuple[str, str]:
    """(username, password) of a JAAS line for `mechanism`; ConfigError otherwise."""
    match = _JAAS.fullmatch(text)
    if match is None:
        raise ConfigError('sasl.jaas.config must read: <LoginModule> required username="..." password="...";')
    if mechanism not in LOGIN_MODULES.get(match["module"], ()):
        raise ConfigError(f"sasl.jaas.config: {match['module']} is not the login module for {mechanism}")
    options = dict(_OPTION.findall(match["options"]))
    if not options.get("username") or "password" not in options:
        raise ConfigError("sasl.jaas.config needs username and password")
    return options["username"], options["password"]


def _sasl_name(username: str) -> str:
    """RFC 5802's saslname: `=` and `,` escaped."""
    return username.replace("=", "=3D").replace(",", "=2C")


class _Exchange:
    """Requests one at a time on a connection nothing else uses yet."""

    def __init__(self, stream: FrameStream, client_id: str) -> None:
        self.stream, self.client_id = stream, client_id
        self.correlation_id = 0

    async def call(self, api_key: int, version: int, fields: dict[str, object]) -> object:
        self.correlation_id += 1
        cls = request_class(api_key, version)
        header = cls.__header_schema__(request_api_key=api_key, request_api_version=version,
                                       correlation_id=self.correlation_id, client_id=self.client_id)
        payload = b"".join([*encode(header), *encode(make(cls, **fields))])
        try:
            self.stream.write(struct.pack(">i", len(payload)) + payload)
            await self.stream.drain()
            frame = await self.stream.read_frame()
        except ConnectionError as exc:
            raise ConnectionError(f"the SASL login was cut off: {exc}") from None
        return decode_response(response_class(api_key, version), frame, self.correlation_id)
