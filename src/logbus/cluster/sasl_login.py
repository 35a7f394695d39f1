"""A broker logging in to another broker's SASL listener (the inter-broker listener).

Configured as Kafka configures it: `sasl.mechanism.inter.broker.protocol` names the mechanism
(PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; Kafka's default, GSSAPI, is not offered) and the JAAS
line `listener.name.<listener>.<mechanism>.sasl.jaas.config` (or `sasl.jaas.config`) gives the
user, e.g. `org.apache.kafka.common.security.scram.ScramLoginModule required username="broker"
password="...";`. The user is an ordinary SCRAM user of the cluster (`logbus users`).

Fresh connections of replica fetchers and broker clients run `InterBrokerLogin.authenticate`
before their first request: the steps of `security/sasl_client.py`'s `SaslLogin` (SaslHandshake
v1, then SaslAuthenticate v2 tokens), which the blocking client of the CLI, the console and Spark
drives too (`client/connection.py`). A refusal is a ConnectionError, retried as any failed
connection is.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..config import BrokerConfig, ConfigError
from ..protocol.codec import encode, make, request_class, response_class
from ..security.listeners import ListenerSettings
from ..security.sasl_client import SaslLogin, parse_jaas
from ..security.sasl_session import SASL_PROTOCOLS
from .broker_client import decode_response
from .frame_stream import FrameStream

MAX_TOKEN_FRAME = 1 << 16  # a SASL answer is a few hundred bytes


@dataclass(frozen=True, slots=True)
class InterBrokerLogin:
    """This broker's login to the other brokers: `login`'s steps on the event loop."""

    login: SaslLogin

    @classmethod
    def from_config(cls, config: BrokerConfig, listeners: ListenerSettings) -> InterBrokerLogin | None:
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
        return cls(SaslLogin(mechanism, username, password))

    async def authenticate(self, stream: FrameStream, client_id: str) -> None:
        """Log in on a fresh connection; SaslLoginError when refused, ConnectionError when cut."""
        exchange = _Exchange(stream, client_id)
        steps = self.login.steps()
        request = next(steps)
        with stream.frames_at_most(MAX_TOKEN_FRAME):
            while True:
                response = await exchange.call(*request)
                try:
                    request = steps.send(response)
                except StopIteration:
                    return


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
