"""The client side of a SASL login (sans-I/O): PLAIN and SCRAM-SHA-256/512 as `sasl.py`'s server
mechanisms expect them, and the JAAS lines that configure one.

`SaslLogin.steps` yields each request (SaslHandshake v1, then SaslAuthenticate v2 tokens) and takes
each answer back; the caller owns the connection. A broker logging in to another broker's
inter-broker listener drives them on the event loop (`cluster/sasl_login.py`), the blocking client
of the CLI, the console and Spark on a socket (`client/connection.py`): one implementation of the
exchange for both.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from ..config import ConfigError
from .sasl import PLAIN
from .sasl_session import SASL_AUTHENTICATE, SASL_HANDSHAKE

LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": (PLAIN,),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}
_JAAS = re.compile(r'\s*(?P<module>[\w.$]+)\s+required(?P<options>(?:\s+\w+\s*=\s*"[^"]*")*)\s*;\s*')
_OPTION = re.compile(r'(\w+)\s*=\s*"([^"]*)"')


class SaslLoginError(ConnectionError):
    """The broker refused the login."""


@dataclass(frozen=True, slots=True)
class SaslLogin:
    mechanism: str
    username: str
    password: str = ""  # never shown: see __repr__

    def __repr__(self) -> str:
        return f"SaslLogin({self.mechanism}, {self.username})"

    def steps(self) -> Generator[tuple[int, int, dict[str, object]], Any, None]:
        """The login: each request as (api key, version, fields), sent by the caller, whose
        response goes back in; SaslLoginError when refused."""
        handshake = yield SASL_HANDSHAKE, 1, {"mechanism": self.mechanism}
        if handshake.error_code != ErrorCode.none:
            raise SaslLoginError(f"{self.mechanism} refused ({handshake.error_code.name}); the broker offers "
                                 f"{', '.join(handshake.mechanisms)}")
        if self.mechanism == PLAIN:
            yield from _token(f"\0{self.username}\0{self.password}".encode())
            return
        import scramp  # here, not at the top: every broker imports this module, few log in with SCRAM

        client = scramp.ScramClient([self.mechanism], _sasl_name(self.username), self.password)
        try:
            client.set_server_first((yield from _token(client.get_client_first().encode())).decode())
            client.set_server_final((yield from _token(client.get_client_final().encode())).decode())
        except (scramp.ScramException, UnicodeDecodeError) as exc:
            raise SaslLoginError(f"the broker's SCRAM answer does not verify: {exc}") from None


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
