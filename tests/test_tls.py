"""TLS on SSL listeners, with real certificates (`logbus certs`), real broker processes and real
clients: confluent-kafka, kafka-python, aiokafka and kcat produce and consume over TLS; mutual
TLS names the client by its certificate; a broker replicates over an SSL inter-broker listener.
Bad handshakes end their own connection only."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from helpers import QUIET, RawConnection, produce_all, wait_until

from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.config import BrokerConfig, ConfigError
from logbus.security.tls import ListenerTls, client_context, principal_mapper, rfc2253
from logbus.testing import BrokerProcess, running_broker, running_cluster

KCAT = shutil.which("kcat")
METADATA, API_VERSIONS = 3, 18


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a broker certificate for 127.0.0.1 and client `alice`, made by `logbus certs`."""
    out = tmp_path_factory.mktemp("certs")
    subprocess.run([sys.executable, "-m", "logbus", "certs", "--out", str(out), "--client", "alice"],
                   check=True, capture_output=True, timeout=60)
    return out


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another CA with a client `mallory`, which the broker does not trust."""
    out = tmp_path_factory.mktemp("other-ca")
    subprocess.run([sys.executable, "-m", "logbus", "certs", "--out", str(out), "--client", "mallory"],
                   check=True, capture_output=True, timeout=60)
    return out


def tls_config(certs: Path, **extra: str) -> dict[str, str]:
    return {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs / "broker.pem"), "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(certs / "ca.pem"), **extra}


@pytest.fixture(scope="module")
def broker(certs: Path) -> Iterator[BrokerProcess]:
    """SSL beside PLAINTEXT; client certificates requested, not required."""
    with running_broker(config=tls_config(certs, **{"ssl.client.auth": "requested"})) as started:
        yield started


def ssl_bootstrap(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.ports['SSL']}"


def librdkafka_tls(certs: Path, client: str | None = None, ca: Path | None = None) -> dict[str, object]:
    config: dict[str, object] = {"security.protocol": "SSL", "ssl.ca.location": str((ca or certs) / "ca.pem")}
    if client:
        config |= {"ssl.certificate.location": str(certs / f"{client}.crt"),
                   "ssl.key.location": str(certs / f"{client}.key")}
    return config


def consume_tls(bootstrap: str, topic: str, count: int, **config: object) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tls", "enable.auto.commit": False,
                         **QUIET, **config})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                values.append(message.value())
    finally:
        consumer.close()
    return values


def metadata_over_tls(bootstrap: str, certs: Path, **config: object) -> list[tuple[str, int]]:
    """The brokers librdkafka sees over TLS; raises KafkaException when it cannot connect."""
    client = Producer({"bootstrap.servers": bootstrap, **QUIET, **librdkafka_tls(certs), **config})
    return [(b.host, b.port) for b in client.list_topics(timeout=5).brokers.values()]


# ---------------------------------------------------------------------------- in process


def test_a_subject_is_printed_in_rfc_2253_form_as_kafka_prints_it() -> None:
    subject = ((("countryName", "US"),), (("organizationName", "acme"),), (("organizationalUnitName", "eng"),),
               (("commonName", "alice, jr"),))
    assert rfc2253(subject) == "CN=alice\\, jr,OU=eng,O=acme,C=US"
    assert rfc2253(((("commonName", "#x "),),)) == "CN=\\#x\\ "


def test_principal_mapping_rules_take_the_first_match_as_kafka_does() -> None:
    mapper = principal_mapper("RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L, RULE:^CN=([^,]*)$/$1/U, DEFAULT")
    assert str(mapper("CN=Alice,OU=Eng,O=acme")) == "User:alice@eng"
    assert str(mapper("CN=bob")) == "User:BOB"
    assert str(mapper("O=other")) == "User:O=other"
    strict = principal_mapper("RULE:^CN=([^,]*),O=acme$/$1/")
    assert str(strict("CN=carol,O=acme")) == "User:carol"
    with pytest.raises(ValueError, match="no ssl.principal.mapping.rules rule matches"):
        strict("CN=mallory,O=evil")


def test_listener_prefixed_ssl_keys_win_and_bad_tls_configs_are_refused(certs: Path) -> None:
    config = BrokerConfig({**tls_config(certs), "ssl.client.auth": "none",
                           "listener.name.ssl.ssl.client.auth": "required"})
    assert config.unknown_keys() == []
    assert ListenerTls.build(config, "SSL").context.verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(ConfigError, match="an SSL listener needs ssl.keystore.location"):
        ListenerTls.build(BrokerConfig({"ssl.keystore.type": "PEM", "ssl.truststore.type": "PEM"}), "SSL")
    with pytest.raises(ConfigError, match="ssl.keystore.type=JKS is not supported; use PEM"):
        ListenerTls.build(BrokerConfig({"ssl.keystore.location": str(certs / "broker.pem")}), "SSL")
    with pytest.raises(ConfigError, match="cannot set up TLS"):
        ListenerTls.build(BrokerConfig({**tls_config(certs), "ssl.keystore.location": str(certs / "ca.pem")}), "SSL")
    inline = BrokerConfig({**tls_config(certs), "ssl.keystore.location": "",
                           "ssl.keystore.key": (certs / "broker.key").read_text(),
                           "ssl.keystore.certificate.chain": (certs / "broker.crt").read_text()})
    assert ListenerTls.build(inline, "SSL").context.verify_mode == ssl.CERT_NONE


def test_an_encrypted_key_needs_its_password(certs: Path, tmp_path: Path) -> None:
    encrypted = tmp_path / "encrypted.key"
    subprocess.run(["openssl", "pkey", "-in", str(certs / "broker.key"), "-aes256", "-passout", "pass:s3cret",
                    "-out", str(encrypted)], check=True, capture_output=True, timeout=30)
    inline = {**tls_config(certs), "ssl.keystore.location": "", "ssl.keystore.key": encrypted.read_text(),
              "ssl.keystore.certificate.chain": (certs / "broker.crt").read_text()}
    assert ListenerTls.build(BrokerConfig({**inline, "ssl.key.password": "s3cret"}), "SSL")
    with pytest.raises(ConfigError, match="cannot set up TLS"):
        ListenerTls.build(BrokerConfig({**inline, "ssl.key.password": "wrong"}), "SSL")


def test_cipher_suites_truststore_type_and_host_name_checks_are_configurable(certs: Path) -> None:
    suite = "ECDHE-RSA-AES128-GCM-SHA256"
    context = ListenerTls.build(BrokerConfig({**tls_config(certs), "ssl.cipher.suites": suite}), "SSL").context
    assert {c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"} == {suite}
    with pytest.raises(ConfigError, match="ssl.truststore.type=JKS is not supported"):
        ListenerTls.build(BrokerConfig({**tls_config(certs), "ssl.truststore.type": "JKS"}), "SSL")
    assert client_context(BrokerConfig(tls_config(certs)), "SSL").check_hostname
    unchecked = BrokerConfig({**tls_config(certs), "ssl.endpoint.identification.algorithm": ""})
    assert not client_context(unchecked, "SSL").check_hostname


def test_serve_refuses_an_ssl_listener_without_a_key_with_exit_code_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "logbus", "serve", "--data-dir", str(tmp_path / "data"),
                           "--set", "listeners=SSL://127.0.0.1:0", "--set", "security.inter.broker.protocol=SSL",
                           "--set", "ssl.keystore.type=PEM"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "an SSL listener needs ssl.keystore.location" in done.stderr, done.stderr


# ---------------------------------------------------------------------------- real clients over TLS


def test_confluent_kafka_produces_and_consumes_over_tls(broker: BrokerProcess, certs: Path) -> None:
    bootstrap = ssl_bootstrap(broker)
    assert metadata_over_tls(bootstrap, certs) == [("127.0.0.1", broker.ports["SSL"])]
    values = [b"confluent %d" % i + b"x" * 1000 for i in range(200)]
    produce_all(bootstrap, "tls-confluent", [(None, v) for v in values], **librdkafka_tls(certs))
    assert consume_tls(bootstrap, "tls-confluent", 200, **librdkafka_tls(certs)) == values


def test_kafka_python_produces_and_consumes_over_tls(broker: BrokerProcess, certs: Path) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition

    tls = {"bootstrap_servers": ssl_bootstrap(broker), "security_protocol": "SSL", "ssl_cafile": str(certs / "ca.pem")}
    producer = KafkaProducer(**tls)
    for i in range(50):
        producer.send("tls-kafka-python", b"kp %d" % i)
    producer.flush(20)
    producer.close()
    consumer = KafkaConsumer(**tls, consumer_timeout_ms=10000, auto_offset_reset="earliest")
    consumer.assign([KafkaTopicPartition("tls-kafka-python", 0)])
    values = [message.value for _, message in zip(range(50), consumer, strict=False)]
    consumer.close()
    assert values == [b"kp %d" % i for i in range(50)]


def test_aiokafka_produces_and_consumes_over_tls(broker: BrokerProcess, certs: Path) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    async def scenario() -> list[bytes]:
        tls = {"bootstrap_servers": ssl_bootstrap(broker), "security_protocol": "SSL",
               "ssl_context": create_ssl_context(cafile=str(certs / "ca.pem"))}
        producer = AIOKafkaProducer(**tls)
        await producer.start()
        try:
            for i in range(50):
                await producer.send_and_wait("tls-aiokafka", b"aio %d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("tls-aiokafka", **tls, auto_offset_reset="earliest")
        await consumer.start()
        try:
            values: list[bytes] = []
            async with asyncio.timeout(20):
                async for message in consumer:
                    values.append(message.value)
                    if len(values) == 50:
                        return values
        finally:
            await consumer.stop()
        return values

    assert asyncio.run(scenario()) == [b"aio %d" % i for i in range(50)]


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
def test_kcat_produces_and_consumes_over_tls(broker: BrokerProcess, certs: Path) -> None:
    tls = ["-b", ssl_bootstrap(broker), "-X", "security.protocol=ssl", "-X", f"ssl.ca.location={certs / 'ca.pem'}"]
    lines = "".join(f"kcat {i}\n" for i in range(20))
    subprocess.run([KCAT, *tls, "-P", "-t", "tls-kcat"], input=lines, text=True, check=True, timeout=30)
    done = subprocess.run([KCAT, *tls, "-C", "-t", "tls-kcat", "-o", "beginning", "-c", "20", "-e"],
                          capture_output=True, text=True, timeout=30)
    assert done.stdout == lines, done.stderr


def test_pipelined_requests_are_all_answered_over_tls(broker: BrokerProcess, certs: Path) -> None:
    """Every response leaves without waiting for the client to send more (a client that pipelines
    its last requests and then only waits must get all answers)."""
    with RawConnection(ssl_bootstrap(broker)) as connection:
        context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        connection.sock = context.wrap_socket(connection.sock, server_hostname="127.0.0.1")
        for _ in range(5):
            connection.send_frame(connection.header(API_VERSIONS, 0))
        assert [struct.unpack_from(">i", connection.read_frame())[0] for _ in range(5)] == [1, 2, 3, 4, 5]


def test_a_client_certificate_names_the_principal_by_its_subject(broker: BrokerProcess, certs: Path) -> None:
    assert metadata_over_tls(ssl_bootstrap(broker), certs, **librdkafka_tls(certs, "alice"))
    wait_until(lambda: "authenticated as User:CN=alice,OU=clients,O=logbus" in broker.read_log(),
               message="the DN in the broker log")


def test_a_client_trusting_another_ca_is_refused(broker: BrokerProcess, certs: Path, other_ca: Path) -> None:
    with pytest.raises(KafkaException):
        metadata_over_tls(ssl_bootstrap(broker), certs, **{"ssl.ca.location": str(other_ca / "ca.pem")})


def test_bad_handshakes_close_their_connection_while_others_are_served(broker: BrokerProcess, certs: Path) -> None:
    bootstrap = ssl_bootstrap(broker)
    served = Producer({"bootstrap.servers": bootstrap, **QUIET, **librdkafka_tls(certs)})  # connected throughout
    served.produce("tls-survivor", b"before")
    assert served.flush(20) == 0
    with RawConnection(bootstrap) as garbage:
        garbage.sock.sendall(b"\x00\x00\x00\x10 not a TLS record at all")
        assert garbage.closed_by_broker()
    with RawConnection(bootstrap) as plaintext_client:  # a Kafka request where a ClientHello belongs
        plaintext_client.send_frame(plaintext_client.header(METADATA, 1) + b"\xff\xff\xff\xff")
        assert plaintext_client.closed_by_broker()
    client_context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as raw, \
            pytest.raises((ssl.SSLError, ConnectionError)):
        client_context.wrap_socket(raw, server_hostname="127.0.0.1")  # TLS on the PLAINTEXT port
    delivered: list[object] = []
    served.produce("tls-survivor", b"after", on_delivery=lambda err, _m: delivered.append(err))
    assert served.flush(20) == 0 and delivered == [None]
    assert metadata_over_tls(bootstrap, certs) == [("127.0.0.1", broker.ports["SSL"])]
    plaintext = Producer({"bootstrap.servers": broker.bootstrap, **QUIET})
    assert plaintext.list_topics(timeout=5).brokers
    assert broker.running


def test_a_silent_client_loses_its_connection_after_the_handshake_timeout(broker: BrokerProcess) -> None:
    with RawConnection(ssl_bootstrap(broker)) as silent:
        began = time.monotonic()
        assert silent.closed_by_broker(timeout=20)
        assert time.monotonic() - began < 15


def test_mutual_tls_required_refuses_clients_without_a_trusted_certificate(certs: Path, other_ca: Path) -> None:
    config = tls_config(certs, **{"listener.name.ssl.ssl.client.auth": "required", "ssl.enabled.protocols": "TLSv1.3",
                                  "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=clients,.*$/$1/U,DEFAULT"})
    with running_broker(config=config) as broker:
        bootstrap = ssl_bootstrap(broker)
        tls12 = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        tls12.load_cert_chain(str(certs / "alice.pem"))
        tls12.maximum_version = ssl.TLSVersion.TLSv1_2
        with socket.create_connection(("127.0.0.1", broker.ports["SSL"]), timeout=10) as raw, \
                pytest.raises(ssl.SSLError):
            tls12.wrap_socket(raw, server_hostname="127.0.0.1")  # ssl.enabled.protocols=TLSv1.3
        with pytest.raises(KafkaException):
            metadata_over_tls(bootstrap, certs)  # no certificate
        with pytest.raises(KafkaException):
            metadata_over_tls(bootstrap, certs,  # a certificate from a CA the broker does not trust
                              **(librdkafka_tls(other_ca, "mallory") | {"ssl.ca.location": str(certs / "ca.pem")}))
        produce_all(bootstrap, "mtls", [(None, b"from alice")], **librdkafka_tls(certs, "alice"))
        assert consume_tls(bootstrap, "mtls", 1, **librdkafka_tls(certs, "alice")) == [b"from alice"]
        wait_until(lambda: "authenticated as User:ALICE" in broker.read_log(), message="the mapped principal")


# ---------------------------------------------------------------------------- a cluster over TLS



def test_a_cluster_replicates_over_an_ssl_inter_broker_listener(zookeeper: ZooKeeperServer, certs: Path) -> None:
    config = {**tls_config(certs), "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
              "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL",
              "inter.broker.listener.name": "INTERNAL", "listener.name.internal.ssl.client.auth": "required"}
    with running_cluster(3, config, zookeeper) as cluster:
        bootstrap = cluster.bootstrap
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic("over-tls", 1, 3)])["over-tls"].result(20)

        def in_sync() -> bool:
            partition = admin.list_topics("over-tls", timeout=5).topics["over-tls"].partitions[0]
            return partition.leader >= 0 and sorted(partition.isrs) == [1, 2, 3]

        wait_until(in_sync, timeout=30, message="a leader and a full ISR")
        produce_all(bootstrap, "over-tls", [(None, b"%d" % i) for i in range(50)], acks="all")
        wait_until(lambda: all(_replicated(b.data_dir) for b in cluster.brokers.values()), timeout=30,
                   message="every replica fetched the records")
        assert any("on INTERNAL authenticated as User:CN=logbus-broker,O=logbus" in b.read_log()
                   for b in cluster.brokers.values())


def _replicated(data_dir: str) -> bool:
    directory = Path(data_dir) / "over-tls-0"
    return directory.is_dir() and sum(f.stat().st_size for f in directory.glob("*.log")) > 0


def test_logbus_own_client_speaks_tls_for_the_cli_with_command_config(broker: BrokerProcess, certs: Path,
                                                                        other_ca: Path, tmp_path: Path) -> None:
    """`logbus log-dirs describe` (logbus's blocking client, not librdkafka) over the SSL listener
    with `--command-config`; a CA that did not sign the broker's certificate is refused."""
    produce_all(broker.bootstrap, "tls-log-dirs", [(None, b"v")])

    def log_dirs(settings: dict[str, object]) -> subprocess.CompletedProcess:
        properties = tmp_path / "client.properties"
        properties.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        return subprocess.run([sys.executable, "-m", "logbus", "log-dirs", "describe", "--bootstrap-server",
                               ssl_bootstrap(broker), "--command-config", str(properties), "--topic-list",
                               "tls-log-dirs", "--timeout", "10"], capture_output=True, text=True, timeout=60)

    for settings in (librdkafka_tls(certs), librdkafka_tls(certs, client="alice")):
        done = log_dirs(settings)
        assert done.returncode == 0, done.stderr
        assert '"partition":"tls-log-dirs-0"' in done.stdout.replace(" ", "")
    refused = log_dirs(librdkafka_tls(certs, ca=other_ca))
    assert refused.returncode != 0 and "CERTIFICATE_VERIFY_FAILED" in refused.stderr
