"""SASL server mechanisms (sans-I/O): PLAIN (RFC 4616), SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802).

A mechanism takes the client's tokens one at a time (`evaluate`) and answers the server's token,
or raises `AuthenticationFailed` with the message Kafka gives the client. When `complete`, the
client is `username`.

Every password is checked against the SCRAM credentials of the store; PLAIN derives the offered
password with the stored salt and iterations (a user with credentials for both mechanisms is
checked against SCRAM-SHA-256's). An unknown user and a wrong password are indistinguishable:
same message, and the same work: PLAIN derives with a stand-in credential, and SCRAM answers an
unknown user with a stand-in salt (fixed per user name for the life of the process, so asking
twice does not tell either) and fails only at the proof, as for a wrong password.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from abc import ABC, abstractmethod
from collections.abc import Callable

from ..errors import AuthenticationFailed
from .scram import DEFAULT_ITERATIONS, MECHANISMS, SALT_BYTES, ScramCredential, ScramMechanism, password_matches

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, *MECHANISMS)

CredentialLookup = Callable[[str, str], ScramCredential | None]  # (user, SCRAM mechanism) -> credential

_STAND_IN_SECRET = os.urandom(32)  # stand-in salts for unknown users: stable per name, unguessable


class SaslMechanismServer(ABC):
    name: str
    complete = False
    username: str | None = None

    @abstractmethod
    def evaluate(self, token: bytes) -> bytes:
        """The server's answer to the client's next token; AuthenticationFailed to refuse."""


def mechanism_server(name: str, lookup: CredentialLookup) -> SaslMechanismServer:
    """The server side of mechanism `name` (one of SUPPORTED_MECHANISMS)."""
    if name == PLAIN:
        return PlainServer(lookup)
    return ScramServer(MECHANISMS[name], lookup)


def stand_in_credential(mechanism: ScramMechanism, username: str) -> ScramCredential:
    """A credential for a user that does not exist: a salt derived from the name, random keys."""
    salt = hmac.digest(_STAND_IN_SECRET, f"{mechanism.name}:{username}".encode(), "sha256")[:SALT_BYTES]
    size = hashlib.new(mechanism.hash_name).digest_size
    return ScramCredential(salt, os.urandom(size), os.urandom(size), DEFAULT_ITERATIONS)


class PlainServer(SaslMechanismServer):
    """RFC 4616: one token, `authzid NUL authcid NUL password`; the authzid empty or the authcid."""

    name = PLAIN
    INVALID = "Authentication failed: Invalid username or password"

    def __init__(self, lookup: CredentialLookup) -> None:
        self._lookup = lookup

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthenticationFailed("Authentication failed: PLAIN takes one token")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, authcid, password = parts
        try:
            username, authorization = authcid.decode("utf-8"), authzid.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(self.INVALID) from None
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if authorization and authorization != username:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        if not self._password_matches(username, password):
            raise AuthenticationFailed(self.INVALID)
        self.username, self.complete = username, True
        return b""

    def _password_matches(self, username: str, password: bytes) -> bool:
        for mechanism in MECHANISMS.values():
            credential = self._lookup(username, mechanism.name)
            if credential is not None:
                return password_matches(mechanism, credential, password)
        mechanism = MECHANISMS["SCRAM-SHA-256"]
        password_matches(mechanism, stand_in_credential(mechanism, username), password)  # the same work
        return False


class ScramServer(SaslMechanismServer):
    """RFC 5802 without channel binding (Kafka's SCRAM): client-first, server-first, client-final,
    server-final. The user name travels as a saslname (`=2C` for a comma, `=3D` for `=`)."""

    def __init__(self, mechanism: ScramMechanism, lookup: CredentialLookup) -> None:
        self.name = mechanism.name
        self._mechanism = mechanism
        self._lookup = lookup
        import scramp  # here, not at the top: few brokers serve SCRAM, and the import is a fifth of a start

        self._server = scramp.ScramMechanism(mechanism.name).make_server(self._auth_info)
        self._user: str | None = None
        self._known = False
        self._step = 0

    @property
    def failure(self) -> str:
        return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {self.name}"

    def _auth_info(self, sasl_name: str) -> tuple[bytes, bytes, bytes, int]:
        self._user = sasl_name.replace("=2C", ",").replace("=3D", "=")
        credential = self._lookup(self._user, self.name)
        self._known = credential is not None
        if credential is None:
            credential = stand_in_credential(self._mechanism, self._user)
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def evaluate(self, token: bytes) -> bytes:
        import scramp

        try:
            message = token.decode("utf-8")
            if self._step == 0:
                self._check_authzid(message)
                self._server.set_client_first(message)
                answer = self._server.get_server_first()
            elif self._step == 1:
                self._server.set_client_final(message)
                if not self._known:
                    raise AuthenticationFailed(self.failure)
                answer = self._server.get_server_final()
                self.username, self.complete = self._user, True
            else:
                raise AuthenticationFailed("Authentication failed: the SCRAM exchange is over")
        except (scramp.ScramException, ValueError, KeyError, IndexError):
            raise AuthenticationFailed(self.failure) from None
        self._step += 1
        return answer.encode("utf-8")

    @staticmethod
    def _check_authzid(client_first: str) -> None:
        """An authorization id in the GS2 header must name the user itself, as Kafka requires."""
        header = client_first.split(",", 2)
        if len(header) < 3:
            raise ValueError("malformed client-first message")
        if header[1] and header[1] != f"a={header[2].partition(',')[0][2:]}":
            raise ValueError("authorization id differs from the user name")
