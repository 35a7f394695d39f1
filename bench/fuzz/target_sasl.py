"""SASL exchanges fed any tokens: PLAIN and SCRAM-SHA-256/512 through the connection's SASL state.

Every token is answered or refused (SASL_AUTHENTICATION_FAILED, the session failed); nothing else
escapes, and a session authenticates only as a user that exists, with that user's password.

Input layout: byte 0 picks the mechanism and the handshake version, the rest is the client's
tokens separated by b"\\x00|\\x00".
"""

from __future__ import annotations

from logbus.errors import AuthenticationFailed
from logbus.security.principal import KafkaPrincipal
from logbus.security.sasl_session import SaslSession
from logbus.security.scram import MECHANISMS, ScramCredential, new_credential

SEPARATOR = b"\x00|\x00"
CHOICES = [("PLAIN", 1), ("SCRAM-SHA-256", 1), ("SCRAM-SHA-512", 1), ("PLAIN", 0), ("SCRAM-SHA-256", 0)]
USERS = {(m, "alice"): new_credential(MECHANISMS[m], "pw") for m in MECHANISMS}
SEEDS = [
    bytes([0]) + b"\x00alice\x00pw",
    bytes([0]) + b"alice\x00alice\x00pw" + SEPARATOR + b"again",
    bytes([1]) + b"n,,n=alice,r=abcdef" + SEPARATOR + b"c=biws,r=abcdefXYZ,p=AAAA",
    bytes([2]) + b"n,a=alice,n=alice,r=x" + SEPARATOR + b"c=,r=,p=",
    bytes([4]) + b"n,,n=nobody=2C,r=\xff" + SEPARATOR + b"",
]


def lookup(user: str, mechanism: str) -> ScramCredential | None:
    return USERS.get((mechanism, user))


def fuzz_one(data: bytes) -> None:
    if not data:
        return
    mechanism, version = CHOICES[data[0] % len(CHOICES)]
    session = SaslSession(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), lookup, 0)
    session.handshake(mechanism, version)
    for token in data[1:].split(SEPARATOR):
        if session.failed or session.authenticated:
            break
        try:
            session.authenticate(token)
        except AuthenticationFailed:
            assert session.failed
        else:
            assert not session.failed
    if session.authenticated:
        assert session.principal == KafkaPrincipal("User", "alice")
