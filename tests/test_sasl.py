"""SASL authentication on a SASL_PLAINTEXT listener, with real brokers and real clients
(confluent-kafka, kafka-python, aiokafka, kcat) for PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512; the
protocol's edges (frames out of order, the legacy v0 flow, oversized tokens, password guessing,
KIP-368 session expiry) on raw sockets, each ending as Kafka ends it; and users created through
`logbus users` or AlterUserScramCredentials logging in at once, on every broker of a cluster."""

from __future__ import annotations

import asyncio
import json
import logging
import statistics
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import kafka
import pytest
import scramp
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from helpers import METADATA, QUIET, RawConnection, wait_until
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.security.scram import ScramCredential
from logbus.testing import BrokerProcess, running_broker, running_cluster

SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE = 17, 18, 36
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_LISTENERS = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                  "sasl.enabled.mechanisms": ",".join(MECHANISMS)}
FAILED_DELAY_MS = 500
PASSWORD = "alice-secret"
KCAT = Path("/usr/bin/kcat")
FUTURE_TIMEOUT_S = 15


def logbus_users(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "logbus", "users", *args], capture_output=True, text=True,
                          timeout=60)


def add_user(store: list[str], name: str, password: str, tmp: Path, mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512")):
    password_file = tmp / f"{name}.password"
    password_file.write_text(password + "\n")
    for mechanism in mechanisms:
        done = logbus_users("set", name, "--password-file", str(password_file), "--mechanism", mechanism, *store)
        assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[BrokerProcess]:
    """A broker whose store got its user from `logbus users set` before it started."""
    tmp = tmp_path_factory.mktemp("sasl")
    add_user(["--data-dir", str(tmp / "data")], "alice", PASSWORD, tmp)
    config = {**SASL_LISTENERS, "connection.failed.authentication.delay.ms": str(FAILED_DELAY_MS)}
    with running_broker(config, data_dir=str(tmp / "data")) as started:
        yield started


def sasl_bootstrap(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}"


def confluent_config(bootstrap: str, mechanism: str, password: str = PASSWORD, user: str = "alice") -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password, **QUIET}


def topic_name() -> str:
    return f"sasl-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------- real clients

@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_produces_and_consumes(broker: BrokerProcess, mechanism: str) -> None:
    topic, config = topic_name(), confluent_config(sasl_bootstrap(broker), mechanism)
    producer = Producer(config)
    for i in range(10):
        producer.produce(topic, b"%d" % i)
    assert producer.flush(FUTURE_TIMEOUT_S) == 0
    consumer = Consumer({**config, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    wait_until(lambda: _poll_into(consumer, values) and len(values) >= 10, timeout=30, message="10 records")
    consumer.close()
    assert sorted(values, key=int) == [b"%d" % i for i in range(10)]


def _poll_into(consumer: Consumer, values: list[bytes]) -> bool:
    message = consumer.poll(0.5)
    if message is not None and message.error() is None:
        values.append(message.value())
    return True


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_produces_and_consumes(broker: BrokerProcess, mechanism: str) -> None:
    topic = topic_name()
    options = {"bootstrap_servers": sasl_bootstrap(broker), "security_protocol": "SASL_PLAINTEXT",
               "sasl_mechanism": mechanism, "sasl_plain_username": "alice", "sasl_plain_password": PASSWORD}
    producer = kafka.KafkaProducer(**options)
    producer.send(topic, b"from kafka-python").get(FUTURE_TIMEOUT_S)
    producer.close()
    consumer = kafka.KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **options)
    assert next(iter(consumer)).value == b"from kafka-python"  # StopIteration after 10 s without it
    consumer.close()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka_produces_and_consumes(broker: BrokerProcess, mechanism: str) -> None:
    topic = topic_name()
    options = {"bootstrap_servers": sasl_bootstrap(broker), "security_protocol": "SASL_PLAINTEXT",
               "sasl_mechanism": mechanism, "sasl_plain_username": "alice", "sasl_plain_password": PASSWORD}

    async def scenario() -> bytes:
        producer = AIOKafkaProducer(**options)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"from aiokafka")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **options)
        await consumer.start()
        try:
            return (await asyncio.wait_for(consumer.getone(), FUTURE_TIMEOUT_S)).value
        finally:
            await consumer.stop()

    assert asyncio.run(scenario()) == b"from aiokafka"


@pytest.mark.skipif(not KCAT.exists(), reason="kcat is not installed")
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kcat_produces_and_reads_back(broker: BrokerProcess, mechanism: str) -> None:
    topic = topic_name()
    auth = ["-b", sasl_bootstrap(broker), "-X", "security.protocol=SASL_PLAINTEXT", "-X",
            f"sasl.mechanisms={mechanism}", "-X", "sasl.username=alice", "-X", f"sasl.password={PASSWORD}"]
    produced = subprocess.run([str(KCAT), *auth, "-P", "-t", topic], input="one\ntwo\n", capture_output=True,
                              text=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    read = subprocess.run([str(KCAT), *auth, "-C", "-t", topic, "-o", "beginning", "-c", "2", "-e"],
                          capture_output=True, text=True, timeout=60)
    assert read.stdout.split() == ["one", "two"], read.stderr


# ---------------------------------------------------------------- wrong passwords

@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_is_told_the_password_is_wrong(broker: BrokerProcess, mechanism: str) -> None:
    errors: list[KafkaError] = []
    producer = Producer({**confluent_config(sasl_bootstrap(broker), mechanism, "wrong"), "error_cb": errors.append})
    wait_until(lambda: producer.poll(0.2) is not None and any(e.code() == KafkaError._AUTHENTICATION for e in errors),
               timeout=20, message="an authentication error")
    message = next(e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION)
    assert "Authentication failed" in message


@pytest.mark.parametrize("user", ["alice", "nobody"])
def test_kafka_python_and_aiokafka_get_sasl_authentication_failed(broker: BrokerProcess, user: str,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Unknown user or wrong password: the same error 58 and message (nothing tells them apart)."""
    options = {"bootstrap_servers": sasl_bootstrap(broker), "security_protocol": "SASL_PLAINTEXT",
               "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": user, "sasl_plain_password": "wrong"}
    caplog.set_level(logging.ERROR)
    with pytest.raises(kafka.errors.KafkaError):
        kafka.KafkaProducer(bootstrap_timeout_ms=3000, **options)  # its first attempt fails in ~0.6 s

    async def aiokafka_start() -> None:
        producer = AIOKafkaProducer(request_timeout_ms=3000, **options)
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(Exception, match="Unable to bootstrap"):
        asyncio.run(aiokafka_start())
    expected = ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
                "SCRAM-SHA-256")
    reports = [r for r in caplog.records if "[Error 58] SaslAuthenticationFailed" in r.getMessage()]
    assert {r.name.split(".")[0] for r in reports} == {"kafka", "aiokafka"}, [r.getMessage() for r in reports]
    assert all(expected in r.getMessage() for r in reports), [r.getMessage() for r in reports]


def test_password_guessing_is_slowed_and_others_keep_being_served(broker: BrokerProcess) -> None:
    """An attacker guessing in a loop waits connection.failed.authentication.delay.ms per guess;
    a client authenticated on another connection is served meanwhile at its usual pace."""
    guesses: list[float] = []
    stop = threading.Event()

    def guess() -> None:
        while not stop.is_set():
            with RawConnection(sasl_bootstrap(broker)) as attacker:
                handshake(attacker, "PLAIN")
                started = time.monotonic()
                answer = attacker.call(SASL_AUTHENTICATE, 2, auth_bytes=b"\0alice\0guess")
                guesses.append(time.monotonic() - started)
                assert answer.error_code == ErrorCode.sasl_authentication_failed
                assert attacker.closed_by_broker()

    attacker = threading.Thread(target=guess)
    attacker.start()
    try:
        with RawConnection(sasl_bootstrap(broker)) as honest:
            login_plain(honest)
            latencies = []
            for _ in range(20):
                started = time.monotonic()
                honest.call(METADATA, 12, topics=None, allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False)
                latencies.append(time.monotonic() - started)
        wait_until(lambda: len(guesses) >= 3, timeout=20, message="three guesses")
    finally:
        stop.set()
        attacker.join(30)
    assert min(guesses) >= FAILED_DELAY_MS / 1000
    assert statistics.median(latencies) < FAILED_DELAY_MS / 1000 / 5


# ---------------------------------------------------------------- the protocol's edges, raw

def handshake(connection: RawConnection, mechanism: str, version: int = 1) -> object:
    answer = connection.call(SASL_HANDSHAKE, version, mechanism=mechanism)
    assert answer.error_code == ErrorCode.none, answer
    return answer


def login_plain(connection: RawConnection, password: str = PASSWORD) -> object:
    handshake(connection, "PLAIN")
    answer = connection.call(SASL_AUTHENTICATE, 2, auth_bytes=f"\0alice\0{password}".encode())
    assert answer.error_code == ErrorCode.none, answer
    return answer


def metadata(connection: RawConnection) -> object:
    return connection.call(METADATA, 12, topics=None, allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)


def test_api_versions_then_handshake_advertises_the_enabled_mechanisms(broker: BrokerProcess) -> None:
    with RawConnection(sasl_bootstrap(broker)) as connection:
        versions = connection.call(API_VERSIONS, 3, client_software_name="raw", client_software_version="1")
        keys = {api.api_key: (api.min_version, api.max_version) for api in versions.api_keys}
        assert keys[SASL_HANDSHAKE] == (0, 1) and keys[SASL_AUTHENTICATE] == (0, 2)
        assert keys[50] == (0, 0) and keys[51] == (0, 0)
        answer = handshake(connection, "SCRAM-SHA-512")
        assert tuple(answer.mechanisms) == MECHANISMS


@pytest.mark.parametrize("first", ["metadata", "authenticate", "api versions twice"])
def test_requests_out_of_order_before_authentication_close_the_connection(broker: BrokerProcess,
                                                                          first: str) -> None:
    with RawConnection(sasl_bootstrap(broker)) as connection:
        if first == "metadata":
            connection.send_frame(connection.header(METADATA, 12) + b"\xff\xff\xff\xff\x00\x00\x00")
        elif first == "authenticate":  # SaslAuthenticate before SaslHandshake
            connection.send_frame(connection.header(SASL_AUTHENTICATE, 2) + b"\x01\x00")
        else:
            connection.call(API_VERSIONS, 3, client_software_name="raw", client_software_version="1")
            connection.send_frame(connection.header(API_VERSIONS, 3) + b"\x01\x01\x00")
        assert connection.closed_by_broker()


def test_after_the_handshake_only_tokens_are_served(broker: BrokerProcess) -> None:
    with RawConnection(sasl_bootstrap(broker)) as connection:
        handshake(connection, "PLAIN")
        connection.send_frame(connection.header(METADATA, 12) + b"\xff\xff\xff\xff\x00\x00\x00")
        assert connection.closed_by_broker()


def test_a_disabled_mechanism_is_refused_with_the_list_then_closed(tmp_path) -> None:
    with running_broker({**SASL_LISTENERS, "sasl.enabled.mechanisms": "SCRAM-SHA-512"}) as scram_only, \
            RawConnection(sasl_bootstrap(scram_only)) as connection:
        answer = connection.call(SASL_HANDSHAKE, 1, mechanism="PLAIN")
        assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
        assert tuple(answer.mechanisms) == ("SCRAM-SHA-512",)
        assert connection.closed_by_broker()


TWO_SASL_LISTENERS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,PLAIN_ONLY://127.0.0.1:0,SCRAM_ONLY://127.0.0.1:0",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,PLAIN_ONLY:SASL_PLAINTEXT,SCRAM_ONLY:SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "SCRAM-SHA-512", "listener.name.plain_only.sasl.enabled.mechanisms": "PLAIN",
}


def _confluent_produce_error(bootstrap: str, mechanism: str) -> KafkaError | None:
    """Produce one record with confluent-kafka: None once delivered, else the first error it reports."""
    errors: list[KafkaError] = []
    producer = Producer({**confluent_config(bootstrap, mechanism), "error_cb": errors.append})
    producer.produce(topic_name(), b"x", on_delivery=lambda error, _message: errors.append(error))

    def outcome() -> bool:
        producer.poll(0.1)
        return bool(errors)

    wait_until(outcome, timeout=30, message=f"{mechanism} on {bootstrap}: delivered or refused")
    return errors[0]


def test_each_listener_offers_and_accepts_its_own_mechanisms(tmp_path) -> None:
    """listener.name.plain_only.sasl.enabled.mechanisms overrides sasl.enabled.mechanisms on that listener only."""
    add_user(["--data-dir", str(tmp_path / "data")], "alice", PASSWORD, tmp_path, mechanisms=("SCRAM-SHA-512",))
    with running_broker(TWO_SASL_LISTENERS, data_dir=str(tmp_path / "data")) as started:
        plain_only = f"127.0.0.1:{started.ports['PLAIN_ONLY']}"
        scram_only = f"127.0.0.1:{started.ports['SCRAM_ONLY']}"
        assert _confluent_produce_error(plain_only, "PLAIN") is None
        assert _confluent_produce_error(scram_only, "SCRAM-SHA-512") is None
        for bootstrap, mechanism, offered in ((plain_only, "SCRAM-SHA-512", ("PLAIN",)),
                                              (scram_only, "PLAIN", ("SCRAM-SHA-512",))):
            refused = _confluent_produce_error(bootstrap, mechanism)
            assert refused is not None and "Unsupported SASL mechanism" in refused.str(), refused
            with RawConnection(bootstrap) as connection:
                answer = connection.call(SASL_HANDSHAKE, 1, mechanism=mechanism)
                assert (answer.error_code, tuple(answer.mechanisms)) == (ErrorCode.unsupported_sasl_mechanism, offered)
                assert connection.closed_by_broker()


def test_serve_refuses_an_unknown_mechanism_on_a_listener(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "logbus", "serve", "--data-dir", str(tmp_path / "data"),
         *[arg for key, value in TWO_SASL_LISTENERS.items() for arg in ("--set", f"{key}={value}")],
         "--set", "listener.name.scram_only.sasl.enabled.mechanisms=GSSAPI"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "Invalid value 'GSSAPI' for configuration listener.name.scram_only.sasl.enabled.mechanisms" in done.stderr


def test_the_default_mechanisms_are_scram_only() -> None:
    with running_broker({"listeners": SASL_LISTENERS["listeners"]}) as default, \
            RawConnection(sasl_bootstrap(default)) as connection:
        answer = connection.call(SASL_HANDSHAKE, 1, mechanism="PLAIN")
        assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
        assert tuple(answer.mechanisms) == ("SCRAM-SHA-256", "SCRAM-SHA-512")


def test_sasl_requests_on_a_plaintext_listener_are_illegal_state(broker: BrokerProcess) -> None:
    with RawConnection(broker.bootstrap) as connection:
        assert connection.call(SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == ErrorCode.illegal_sasl_state
        answer = connection.call(SASL_AUTHENTICATE, 2, auth_bytes=b"\0alice\0x")
        assert answer.error_code == ErrorCode.illegal_sasl_state
        assert metadata(connection).brokers  # still served


def test_authenticated_connection_answers_sasl_authenticate_as_kafka(broker: BrokerProcess) -> None:
    with RawConnection(sasl_bootstrap(broker)) as connection:
        login_plain(connection)
        answer = connection.call(SASL_AUTHENTICATE, 2, auth_bytes=b"\0alice\0whatever")
        assert answer.error_code == ErrorCode.illegal_sasl_state
        assert metadata(connection).brokers  # still served, as alice


def test_an_oversized_token_before_authentication_closes_the_connection(broker: BrokerProcess) -> None:
    """sasl.server.max.receive.size (512 KiB): an unauthenticated client cannot make the broker
    buffer socket.request.max.bytes (100 MiB)."""
    with RawConnection(sasl_bootstrap(broker)) as connection:
        handshake(connection, "PLAIN")
        connection.sock.sendall(struct.pack(">i", 524288 + 1) + b"x" * 1024)
        assert connection.closed_by_broker()


def test_large_requests_pass_once_authenticated(broker: BrokerProcess) -> None:
    producer = Producer(confluent_config(sasl_bootstrap(broker), "SCRAM-SHA-256"))
    producer.produce(topic_name(), b"v" * 700_000)
    assert producer.flush(FUTURE_TIMEOUT_S) == 0


def test_legacy_v0_flow_plain_then_requests(broker: BrokerProcess) -> None:
    with RawConnection(sasl_bootstrap(broker)) as connection:
        handshake(connection, "PLAIN", version=0)
        connection.send_frame(f"\0alice\0{PASSWORD}".encode())
        assert connection.read_frame() == b""
        assert metadata(connection).brokers


def test_legacy_v0_flow_scram(broker: BrokerProcess) -> None:
    client = scramp.ScramClient(["SCRAM-SHA-512"], "alice", PASSWORD)
    with RawConnection(sasl_bootstrap(broker)) as connection:
        handshake(connection, "SCRAM-SHA-512", version=0)
        connection.send_frame(client.get_client_first().encode())
        client.set_server_first(connection.read_frame().decode())
        connection.send_frame(client.get_client_final().encode())
        client.set_server_final(connection.read_frame().decode())
        assert metadata(connection).brokers


def test_legacy_v0_wrong_password_closes_after_the_delay(broker: BrokerProcess) -> None:
    with RawConnection(sasl_bootstrap(broker)) as connection:
        handshake(connection, "PLAIN", version=0)
        started = time.monotonic()
        connection.send_frame(b"\0alice\0wrong")
        assert connection.closed_by_broker()
        assert time.monotonic() - started >= FAILED_DELAY_MS / 1000


# ---------------------------------------------------------------- KIP-368

# librdkafka re-authenticates at 90 % of the session lifetime: a lifetime of 1 s left it 100 ms,
# which a loaded 2-core machine overran (its Produce came after expiry and the broker closed the
# connection, as Kafka's does). 2.5 s leaves 250 ms.
SESSION_LIFETIME_S = 2.5

@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory) -> Iterator[BrokerProcess]:
    tmp = tmp_path_factory.mktemp("reauth")
    add_user(["--data-dir", str(tmp / "data")], "alice", PASSWORD, tmp)
    reauth_ms = str(int(SESSION_LIFETIME_S * 1000))
    with running_broker({**SASL_LISTENERS, "connections.max.reauth.ms": reauth_ms}, data_dir=str(tmp / "data")) as b:
        yield b


def test_session_lifetime_is_announced_and_an_expired_session_is_closed(reauth_broker: BrokerProcess) -> None:
    with RawConnection(sasl_bootstrap(reauth_broker)) as connection:
        assert login_plain(connection).session_lifetime.total_seconds() == SESSION_LIFETIME_S
        before = _expired_closes(reauth_broker)
        wait_until(lambda: _served_until_closed(connection), timeout=10, message="the expired session closed")
        wait_until(lambda: _expired_closes(reauth_broker) == before + 1, message="the close in the broker's log")


def _served_until_closed(connection: RawConnection) -> bool:
    """One Metadata request: False while it is answered, True once the broker closed instead."""
    try:
        metadata(connection)
    except (AssertionError, OSError):
        return True
    return False


def test_reauthentication_on_the_open_connection_renews_the_session(reauth_broker: BrokerProcess) -> None:
    with RawConnection(sasl_bootstrap(reauth_broker)) as connection:
        login_plain(connection)
        last_login, renewals = time.monotonic(), 0
        while renewals < 3:  # past several lifetimes, renewing every half of one
            assert metadata(connection).brokers
            if time.monotonic() - last_login >= SESSION_LIFETIME_S / 2:
                login_plain(connection)
                last_login, renewals = time.monotonic(), renewals + 1
        assert metadata(connection).brokers


def test_confluent_kafka_reauthenticates_and_keeps_producing(reauth_broker: BrokerProcess) -> None:
    topic, errors = topic_name(), []
    producer = Producer({**confluent_config(sasl_bootstrap(reauth_broker), "SCRAM-SHA-256"),
                         "error_cb": errors.append})
    expired_closes = _expired_closes(reauth_broker)
    deadline, sent = time.monotonic() + 2.2 * SESSION_LIFETIME_S, 0
    while time.monotonic() < deadline:  # across two renewals
        producer.produce(topic, b"%d" % sent)
        sent += 1
        assert producer.flush(FUTURE_TIMEOUT_S) == 0
    assert sent > 3 and not [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert _expired_closes(reauth_broker) == expired_closes  # renewed in time, never cut off


def _expired_closes(broker: BrokerProcess) -> int:
    """Connections the broker closed for a request on an expired session, so far."""
    return Path(broker.log_path).read_text().count("is not allowed in SASL state authenticated")


# ---------------------------------------------------------------- users added while running

def test_a_user_added_through_the_admin_api_logs_in_at_once(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    upsertion = UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                             b"dave-pw")
    admin.alter_user_scram_credentials([upsertion])["dave"].result(FUTURE_TIMEOUT_S)
    for mechanism in ("PLAIN", "SCRAM-SHA-256"):
        probe = AdminClient(confluent_config(sasl_bootstrap(broker), mechanism, "dave-pw", user="dave"))
        assert probe.list_topics(timeout=10).brokers


def test_cluster_users_reach_every_broker(tmp_path, zookeeper: ZooKeeperServer) -> None:
    """ZooKeeper: a user set by `logbus users --zookeeper` and one added through broker 1's
    AlterUserScramCredentials both log in on broker 2 (its watch brings them). The second one's
    name is stored as Kafka's Sanitizer writes it (`erin%40acme`), beside where quotas go."""
    with running_cluster(2, SASL_LISTENERS, zookeeper=zookeeper) as cluster:
        connect = cluster.config["zookeeper.connect"]
        add_user(["--zookeeper", connect], "carol", "carol-pw", tmp_path, mechanisms=("SCRAM-SHA-512",))
        listed = logbus_users("list", "--zookeeper", connect)
        assert listed.stdout.split("\t")[0] == "carol"
        one, two = (f"127.0.0.1:{cluster.brokers[i].ports['SASL_PLAINTEXT']}" for i in (1, 2))
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.brokers[1].ports['PLAINTEXT']}", **QUIET})
        upsertion = UserScramCredentialUpsertion("erin@acme", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                                 b"erin-pw")
        admin.alter_user_scram_credentials([upsertion])["erin@acme"].result(FUTURE_TIMEOUT_S)
        for bootstrap in (one, two):
            for user, password, mechanism in (("carol", "carol-pw", "SCRAM-SHA-512"),
                                              ("erin@acme", "erin-pw", "SCRAM-SHA-256")):
                wait_until(lambda b=bootstrap, u=user, p=password, m=mechanism: _logs_in(b, m, u, p), timeout=15,
                           message=f"{user} logs in at {bootstrap}")
        _assert_kafka_zookeeper_layout(connect)


def _assert_kafka_zookeeper_layout(connect: str) -> None:
    """Kafka 3.x's: the user's config znode and a change notification per alteration."""
    client = KazooClient(hosts=connect)
    client.start(timeout=15)
    try:
        stored = json.loads(client.get("/config/users/erin%40acme")[0])
        assert stored["version"] == 1 and list(stored["config"]) == ["SCRAM-SHA-256"]
        assert ScramCredential.from_text(stored["config"]["SCRAM-SHA-256"]).iterations == 4096
        changes = [json.loads(client.get(f"/config/changes/{child}")[0])
                   for child in client.get_children("/config/changes")]
        assert {"version": 2, "entity_path": "users/erin%40acme"} in changes
        assert {"version": 2, "entity_path": "users/carol"} in changes
    finally:
        client.stop()
        client.close()


def _logs_in(bootstrap: str, mechanism: str, user: str, password: str) -> bool:
    with RawConnection(bootstrap) as connection:
        handshake(connection, mechanism)
        client = scramp.ScramClient([mechanism], user, password)
        first = connection.call(SASL_AUTHENTICATE, 2, auth_bytes=client.get_client_first().encode())
        if first.error_code != ErrorCode.none:
            return False
        client.set_server_first(first.auth_bytes.decode())
        final = connection.call(SASL_AUTHENTICATE, 2, auth_bytes=client.get_client_final().encode())
        return final.error_code == ErrorCode.none


# ---------------------------------------------------------------- between brokers

INTER_BROKER_SASL = {
    "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
    "listener.name.internal.scram-sha-256.sasl.jaas.config":
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="broker-pw";',
}


@pytest.mark.parametrize("settings, message", [
    ({"sasl.mechanism.inter.broker.protocol": "GSSAPI"}, "must be included in sasl.enabled.mechanisms"),
    ({"listener.name.internal.scram-sha-256.sasl.jaas.config": ""}, "set listener.name.internal.scram-sha-256"),
    ({"listener.name.internal.scram-sha-256.sasl.jaas.config":
      'org.apache.kafka.common.security.plain.PlainLoginModule required username="b" password="p";'},
     "not the login module for SCRAM-SHA-256"),
])
def test_serve_refuses_a_sasl_inter_broker_listener_without_a_usable_login(tmp_path, settings: dict,
                                                                           message: str) -> None:
    config = {**INTER_BROKER_SASL, **settings}
    done = subprocess.run(
        [sys.executable, "-m", "logbus", "serve", "--data-dir", str(tmp_path / "data"),
         *[arg for key, value in config.items() for arg in ("--set", f"{key}={value}")]],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr


def test_a_cluster_replicates_over_a_sasl_inter_broker_listener(tmp_path, zookeeper: ZooKeeperServer) -> None:
    """Followers log in (SCRAM-SHA-256, as user `broker`) to fetch; the ISR fills only if they do."""
    with running_cluster(2, INTER_BROKER_SASL, zookeeper=zookeeper) as cluster:
        client_listener = ",".join(f"127.0.0.1:{b.ports['PLAINTEXT']}" for b in cluster.brokers.values())
        admin = AdminClient({"bootstrap.servers": client_listener, **QUIET})
        upsertion = UserScramCredentialUpsertion("broker", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                                 b"broker-pw")
        admin.alter_user_scram_credentials([upsertion])["broker"].result(FUTURE_TIMEOUT_S)
        admin.create_topics([NewTopic("over-sasl", 1, 2)])["over-sasl"].result(FUTURE_TIMEOUT_S)

        def in_sync() -> bool:
            partition = admin.list_topics("over-sasl", timeout=5).topics["over-sasl"].partitions[0]
            return partition.leader >= 0 and sorted(partition.isrs) == [1, 2]

        wait_until(in_sync, timeout=30, message="both replicas in sync over the SASL listener")
        producer = Producer({"bootstrap.servers": client_listener, "acks": "all", **QUIET})
        for i in range(20):
            producer.produce("over-sasl", b"%d" % i)
        assert producer.flush(FUTURE_TIMEOUT_S) == 0
        assert in_sync()
        logs = "".join(Path(b.log_path).read_text() for b in cluster.brokers.values())
        assert "is not allowed in SASL state" not in logs  # no unauthenticated fetch reached a broker


def test_a_broker_alone_may_have_only_a_sasl_listener(tmp_path) -> None:
    add_user(["--data-dir", str(tmp_path / "data")], "alice", PASSWORD, tmp_path)
    config = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "inter.broker.listener.name": "SASL_PLAINTEXT",
              "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
              "sasl.jaas.config": f'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  f'username="alice" password="{PASSWORD}";'}
    with running_broker(config, data_dir=str(tmp_path / "data")) as alone:
        assert _logs_in(sasl_bootstrap(alone), "SCRAM-SHA-512", "alice", PASSWORD)
        admin = AdminClient(confluent_config(sasl_bootstrap(alone), "SCRAM-SHA-512"))
        described = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")])
        jaas = next(iter(described.values())).result(FUTURE_TIMEOUT_S)["sasl.jaas.config"]
        assert jaas.is_sensitive and jaas.value is None  # the broker's password is never shown


# ---------------------------------------------------------------- SASL_SSL

@pytest.fixture(scope="module")
def sasl_ssl_broker(tmp_path_factory) -> Iterator[tuple[BrokerProcess, Path]]:
    """SASL over TLS beside PLAINTEXT; certificates from `logbus certs`."""
    tmp = tmp_path_factory.mktemp("sasl-ssl")
    subprocess.run([sys.executable, "-m", "logbus", "certs", "--out", str(tmp / "certs")], check=True,
                   capture_output=True, timeout=60)
    add_user(["--data-dir", str(tmp / "data")], "alice", PASSWORD, tmp)
    config = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN,"
              "SCRAM-SHA-512", "ssl.keystore.type": "PEM", "ssl.keystore.location": str(tmp / "certs" / "broker.pem")}
    with running_broker(config, data_dir=str(tmp / "data")) as started:
        yield started, tmp / "certs" / "ca.pem"


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_sasl_ssl_authenticates_over_tls(sasl_ssl_broker: tuple[BrokerProcess, Path], mechanism: str) -> None:
    broker, ca = sasl_ssl_broker
    bootstrap = f"127.0.0.1:{broker.ports['SASL_SSL']}"
    config = {**confluent_config(bootstrap, mechanism), "security.protocol": "SASL_SSL", "ssl.ca.location": str(ca)}
    producer = Producer(config)
    producer.produce(topic_name(), b"over tls")
    assert producer.flush(FUTURE_TIMEOUT_S) == 0
    errors: list[KafkaError] = []
    refused = Producer({**config, "sasl.password": "wrong", "error_cb": errors.append})
    wait_until(lambda: refused.poll(0.2) is not None and any(e.code() == KafkaError._AUTHENTICATION for e in errors),
               timeout=20, message="an authentication error over TLS")
