"""One connection's SASL state (sans-I/O), as Kafka's SaslServerAuthenticator keeps it.

Before authentication a SASL listener serves ApiVersions (once, first), then SaslHandshake, then
the mechanism's tokens: in SaslAuthenticate requests after SaslHandshake v1, or as raw
length-prefixed frames after SaslHandshake v0 (the legacy flow of clients before Kafka 1.0). Any
other request in any of these states is a protocol violation: `admits` says False and the
connection closes, as Kafka closes it. A refused handshake or authentication is answered, then
the connection closes (`failed`).

KIP-368: with `connections.max.reauth.ms` > 0 a session lasts that long (SaslAuthenticate v1+
tells the client); the client re-authenticates on the open connection (SaslHandshake, then
SaslAuthenticate, same mechanism, same user). A connection whose session has expired is served
nothing but that SaslHandshake: any other request closes it.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable

from ..errors import AuthenticationFailed, IllegalSaslStateError, UnsupportedSaslMechanismError
from .principal import ANONYMOUS, USER_TYPE, KafkaPrincipal
from .sasl import CredentialLookup, SaslMechanismServer, mechanism_server

SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE = 17, 18, 36
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
AFTER_AUTHENTICATION = "SaslAuthenticate request received after successful authentication"  # Kafka's words


class Stage(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake or versions"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"  # SaslAuthenticate requests carry the tokens
    LEGACY_TOKENS = "legacy tokens"  # raw length-prefixed tokens (after SaslHandshake v0)
    AUTHENTICATED = "authenticated"
    REAUTHENTICATE = "reauthenticate"  # authenticated, re-authenticating (KIP-368)
    FAILED = "failed"  # the refusal is being answered; then the connection closes


ALLOWED: dict[Stage, frozenset[int]] = {
    Stage.HANDSHAKE_OR_VERSIONS: frozenset({API_VERSIONS, SASL_HANDSHAKE}),
    Stage.HANDSHAKE: frozenset({SASL_HANDSHAKE}),
    Stage.AUTHENTICATE: frozenset({SASL_AUTHENTICATE}),
    Stage.REAUTHENTICATE: frozenset({SASL_AUTHENTICATE}),
    Stage.LEGACY_TOKENS: frozenset(),
    Stage.FAILED: frozenset(),
}


class SaslSession:
    def __init__(self, enabled_mechanisms: tuple[str, ...], lookup: CredentialLookup, max_reauth_ms: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled_mechanisms = enabled_mechanisms
        self.stage = Stage.HANDSHAKE_OR_VERSIONS
        self.principal: KafkaPrincipal = ANONYMOUS
        self._lookup = lookup
        self._max_reauth_ms = max_reauth_ms
        self._clock = clock
        self._mechanism: SaslMechanismServer | None = None
        self._expires_at: float | None = None

    @property
    def authenticated(self) -> bool:
        return self.stage in (Stage.AUTHENTICATED, Stage.REAUTHENTICATE)

    @property
    def failed(self) -> bool:
        return self.stage is Stage.FAILED

    @property
    def expects_raw_token(self) -> bool:
        return self.stage is Stage.LEGACY_TOKENS

    def admits(self, api_key: int) -> bool:
        """Whether a request of `api_key` may be served now; False: close the connection."""
        if self.stage is Stage.AUTHENTICATED:
            return not self.expired() or api_key == SASL_HANDSHAKE
        allowed = api_key in ALLOWED[self.stage]
        if allowed and api_key == API_VERSIONS:
            self.stage = Stage.HANDSHAKE
        return allowed

    def expired(self) -> bool:
        return self._expires_at is not None and self._clock() >= self._expires_at

    def handshake(self, mechanism: str, version: int) -> None:
        """SaslHandshake: choose the mechanism (or, authenticated, begin re-authentication).
        UnsupportedSaslMechanismError or IllegalSaslStateError (the session has failed) to refuse it."""
        if self.stage is Stage.AUTHENTICATED:
            self._begin_reauthentication(mechanism, version)
            return
        if mechanism not in self.enabled_mechanisms:
            self.stage = Stage.FAILED
            raise UnsupportedSaslMechanismError(f"Unsupported SASL mechanism {mechanism}")
        self._mechanism = mechanism_server(mechanism, self._lookup)
        self.stage = Stage.AUTHENTICATE if version >= 1 else Stage.LEGACY_TOKENS

    def _begin_reauthentication(self, mechanism: str, version: int) -> None:
        """KIP-368 needs SaslAuthenticate (handshake v1+) and the mechanism of the first authentication."""
        if version < 1 or self._mechanism is None or mechanism != self._mechanism.name:
            self.stage = Stage.FAILED
            raise IllegalSaslStateError(f"Cannot re-authenticate with SaslHandshake v{version} and {mechanism}")
        self._mechanism = mechanism_server(mechanism, self._lookup)
        self.stage = Stage.REAUTHENTICATE

    def authenticate(self, token: bytes) -> bytes:
        """SaslAuthenticate: the answer to the next token of the exchange; AuthenticationFailed
        (the session has failed) to refuse it. Once authenticated (and not re-authenticating)
        it is IllegalSaslStateError and the connection stays, as in Kafka."""
        if self.stage is Stage.AUTHENTICATED:
            raise IllegalSaslStateError(AFTER_AUTHENTICATION)
        return self.exchange(token)

    @property
    def session_lifetime_ms(self) -> int:
        """What SaslAuthenticate v1+ tells the client: `connections.max.reauth.ms` once
        authenticated, 0 for no expiry (and while the exchange goes on)."""
        return max(self._max_reauth_ms, 0) if self.stage is Stage.AUTHENTICATED else 0

    def exchange(self, token: bytes) -> bytes:
        """One token of the exchange; AuthenticationFailed (the session has failed) to refuse it."""
        assert self._mechanism is not None, "a token before the handshake: admits() refuses it"
        try:
            answer = self._mechanism.evaluate(token)
            if self._mechanism.complete:
                self._complete(KafkaPrincipal(USER_TYPE, self._mechanism.username))
        except AuthenticationFailed:
            self.stage = Stage.FAILED
            raise
        return answer

    def _complete(self, principal: KafkaPrincipal) -> None:
        if self.stage is Stage.REAUTHENTICATE and principal != self.principal:
            raise AuthenticationFailed(
                f"Cannot change principals during re-authentication from {self.principal}: {principal}")
        self.principal = principal
        self.stage = Stage.AUTHENTICATED
        self._expires_at = self._clock() + self._max_reauth_ms / 1000 if self._max_reauth_ms > 0 else None

