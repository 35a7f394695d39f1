"""SASL mechanisms and the per-connection SASL state, in process (sans-I/O): PLAIN and SCRAM
against stored SCRAM credentials, with scramp's client as the independent other side."""

from __future__ import annotations

import time

import pytest
import scramp

from logbus.config import ConfigError
from logbus.errors import IllegalSaslStateError, UnsupportedSaslMechanismError
from logbus.security.principal import ANONYMOUS, KafkaPrincipal
from logbus.security.sasl import AuthenticationFailed, PlainServer, ScramServer, mechanism_server
from logbus.security.sasl_client import parse_jaas
from logbus.security.sasl_session import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE, SaslSession, Stage
from logbus.security.scram import MECHANISMS, ScramCredential, new_credential

METADATA, PRODUCE = 3, 0
USERS = {
    ("alice", "SCRAM-SHA-256"): new_credential(MECHANISMS["SCRAM-SHA-256"], "alice-pw"),
    ("alice", "SCRAM-SHA-512"): new_credential(MECHANISMS["SCRAM-SHA-512"], "alice-pw"),
    ("bob,=x", "SCRAM-SHA-512"): new_credential(MECHANISMS["SCRAM-SHA-512"], "bob-pw"),
}


def lookup(user: str, mechanism: str) -> ScramCredential | None:
    return USERS.get((user, mechanism))


def scram_login(server: ScramServer | SaslSession, mechanism: str, user: str, password: str) -> None:
    """A full SCRAM exchange with scramp's client (a saslname-encoded user name)."""
    client = scramp.ScramClient([mechanism], user.replace("=", "=3D").replace(",", "=2C"), password)
    step = server.evaluate if isinstance(server, ScramServer) else server.exchange
    server_first = step(client.get_client_first().encode())
    client.set_server_first(server_first.decode())
    server_final = step(client.get_client_final().encode())
    client.set_server_final(server_final.decode())  # the client checks the server's signature too


# ---------------------------------------------------------------- PLAIN

def test_plain_accepts_the_password_and_an_equal_or_empty_authzid() -> None:
    for token in (b"\0alice\0alice-pw", b"alice\0alice\0alice-pw"):
        server = PlainServer(lookup)
        assert server.evaluate(token) == b""
        assert server.complete and server.username == "alice"


@pytest.mark.parametrize("token, message", [
    (b"\0alice\0wrong", "Invalid username or password"),
    (b"\0nobody\0alice-pw", "Invalid username or password"),
    (b"bob\0alice\0alice-pw", "authorization id that is different"),
    (b"\0alice", "expected 3 tokens"),
    (b"\0\0pw", "username not specified"),
    (b"\0alice\0", "password not specified"),
    (b"\0\xff\xfe\0pw", "Invalid username or password"),
])
def test_plain_refusals(token: bytes, message: str) -> None:
    with pytest.raises(AuthenticationFailed, match=message):
        PlainServer(lookup).evaluate(token)


def test_plain_unknown_user_costs_what_a_wrong_password_costs() -> None:
    """The stand-in derivation: an unknown user is not answered faster than a known one."""
    def seconds(token: bytes) -> float:
        start = time.thread_time()
        with pytest.raises(AuthenticationFailed):
            PlainServer(lookup).evaluate(token)
        return time.thread_time() - start

    # This thread's CPU time, interleaved, the least of each: what a busy machine adds is time spent
    # preempted, not CPU (wall-clock minima still flaked with the suite's workers: 1.4 against 5.4 ms).
    pairs = [(seconds(b"\0alice\0nope"), seconds(b"\0nobody\0nope")) for _ in range(15)]
    wrong_password = min(known for known, _ in pairs)
    unknown_user = min(unknown for _, unknown in pairs)
    assert 0.5 < unknown_user / wrong_password < 2.0


# ---------------------------------------------------------------- SCRAM

@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_login_with_an_independent_client(mechanism: str) -> None:
    server = mechanism_server(mechanism, lookup)
    scram_login(server, mechanism, "alice", "alice-pw")
    assert server.complete and server.username == "alice"


def test_scram_user_names_are_saslnames() -> None:
    server = mechanism_server("SCRAM-SHA-512", lookup)
    scram_login(server, "SCRAM-SHA-512", "bob,=x", "bob-pw")
    assert server.username == "bob,=x"


@pytest.mark.parametrize("user, password", [("alice", "wrong"), ("nobody", "alice-pw")])
def test_scram_wrong_password_and_unknown_user_fail_alike(user: str, password: str) -> None:
    server = mechanism_server("SCRAM-SHA-256", lookup)
    with pytest.raises(AuthenticationFailed) as refused:
        scram_login(server, "SCRAM-SHA-256", user, password)
    assert str(refused.value) == ("Authentication failed during authentication due to invalid credentials with "
                                  "SASL mechanism SCRAM-SHA-256")
    assert not server.complete


def test_scram_unknown_user_gets_the_same_salt_each_time() -> None:
    """Otherwise asking twice would tell an unknown user (fresh salt) from a known one."""
    def salt_offered(user: str) -> str:
        first = mechanism_server("SCRAM-SHA-256", lookup).evaluate(f"n,,n={user},r=abc".encode()).decode()
        return dict(part.split("=", 1) for part in first.split(","))["s"]

    assert salt_offered("nobody") == salt_offered("nobody") != salt_offered("someone")


@pytest.mark.parametrize("token", [b"", b"\xff", b"n,,", b"x,,n=alice,r=a", b"n,a=bob,n=alice,r=abc",
                                   b"n,,n=alice,r=abc,e=1", b"p=tls-unique,,n=alice,r=a"])
def test_scram_malformed_client_first_is_a_failure(token: bytes) -> None:
    with pytest.raises(AuthenticationFailed):
        mechanism_server("SCRAM-SHA-256", lookup).evaluate(token)


def test_scram_client_final_with_a_foreign_nonce_fails() -> None:
    server = mechanism_server("SCRAM-SHA-256", lookup)
    server.evaluate(b"n,,n=alice,r=abc")
    with pytest.raises(AuthenticationFailed):
        server.evaluate(b"c=biws,r=abcWRONG,p=AAAA")


# ---------------------------------------------------------------- the session

class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def session(max_reauth_ms: int = 0, clock: Clock | None = None) -> SaslSession:
    return SaslSession(("PLAIN", "SCRAM-SHA-256"), lookup, max_reauth_ms, clock or Clock())


def test_only_versions_and_handshake_come_first() -> None:
    state = session()
    assert not state.admits(METADATA) and not state.admits(SASL_AUTHENTICATE)
    assert state.admits(API_VERSIONS) and not state.admits(API_VERSIONS)  # once
    assert state.admits(SASL_HANDSHAKE)
    state.handshake("PLAIN", 1)
    assert not state.admits(SASL_HANDSHAKE) and not state.admits(METADATA) and state.admits(SASL_AUTHENTICATE)
    state.authenticate(b"\0alice\0alice-pw")
    assert state.principal == KafkaPrincipal("User", "alice")
    assert state.admits(METADATA) and state.admits(PRODUCE)


def test_disabled_mechanism_is_refused_and_fails_the_session() -> None:
    state = session()
    with pytest.raises(UnsupportedSaslMechanismError):
        state.handshake("SCRAM-SHA-512", 1)
    assert state.failed and not state.admits(SASL_AUTHENTICATE)


def test_wrong_password_fails_the_session() -> None:
    state = session()
    state.handshake("PLAIN", 1)
    with pytest.raises(AuthenticationFailed):
        state.authenticate(b"\0alice\0nope")
    assert state.failed and state.principal == ANONYMOUS


def test_handshake_v0_switches_to_raw_tokens() -> None:
    state = session()
    state.handshake("SCRAM-SHA-256", 0)
    assert state.expects_raw_token and not state.admits(SASL_AUTHENTICATE)
    scram_login(state, "SCRAM-SHA-256", "alice", "alice-pw")
    assert state.stage is Stage.AUTHENTICATED and not state.expects_raw_token


def test_session_expires_and_reauthentication_renews_it() -> None:
    clock = Clock()
    state = session(max_reauth_ms=1000, clock=clock)
    state.handshake("PLAIN", 1)
    state.authenticate(b"\0alice\0alice-pw")
    assert state.session_lifetime_ms == 1000
    clock.now += 1.0
    assert not state.admits(METADATA) and state.admits(SASL_HANDSHAKE)
    state.handshake("PLAIN", 1)
    assert state.authenticated
    assert not state.admits(METADATA)  # mid re-authentication: only its tokens
    state.authenticate(b"\0alice\0alice-pw")
    assert state.admits(METADATA)
    with pytest.raises(IllegalSaslStateError, match="after successful authentication"):
        state.authenticate(b"\0alice\0alice-pw")
    assert state.authenticated  # the connection stays


def test_reauthentication_cannot_change_the_user_or_mechanism() -> None:
    state = session(max_reauth_ms=1000)
    state.handshake("PLAIN", 1)
    state.authenticate(b"\0alice\0alice-pw")
    state.handshake("PLAIN", 1)
    USERS[("carol", "SCRAM-SHA-256")] = new_credential(MECHANISMS["SCRAM-SHA-256"], "carol-pw")
    try:
        with pytest.raises(AuthenticationFailed, match="Cannot change principals"):
            state.authenticate(b"\0carol\0carol-pw")
    finally:
        del USERS[("carol", "SCRAM-SHA-256")]
    assert state.failed

    other = session(max_reauth_ms=1000)
    other.handshake("PLAIN", 1)
    other.authenticate(b"\0alice\0alice-pw")
    with pytest.raises(IllegalSaslStateError):
        other.handshake("SCRAM-SHA-256", 1)
    assert other.failed


# ---------------------------------------------------------------- the inter-broker login's JAAS line

def test_jaas_lines_as_kafka_writes_them() -> None:
    line = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="p w";'
    assert parse_jaas(line, "SCRAM-SHA-512") == ("broker", "p w")
    plain = ' org.apache.kafka.common.security.plain.PlainLoginModule required\n  username="a"  password="";'
    assert parse_jaas(plain, "PLAIN") == ("a", "")


@pytest.mark.parametrize("line", [
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="b" password="p"',  # no ;
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="b" password="p";',  # module
    'org.apache.kafka.common.security.scram.ScramLoginModule required password="p";',
    'org.apache.kafka.common.security.scram.ScramLoginModule optional username="b" password="p";',
])
def test_jaas_lines_that_cannot_log_in_are_refused(line: str) -> None:
    with pytest.raises(ConfigError):
        parse_jaas(line, "SCRAM-SHA-256")
