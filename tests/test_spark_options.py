"""The Spark connector's client settings (`logbus.spark.options.client_config`), without Spark: the
Java client's security options (Spark's Kafka source takes those) become librdkafka's, which
confluent-kafka's producer and logbus's own client both accept."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer
from test_tls import certs  # noqa: F401 - the fixture

from logbus.client.security import ClientSecurity
from logbus.spark.options import OptionError, client_config

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
JAVA_ONLY = {"sasl.jaas.config", "ssl.truststore.location", "ssl.truststore.type", "ssl.keystore.location",
             "ssl.keystore.type"}


def settings(**options: str) -> dict[str, str]:
    """client_config of `kafka.`-prefixed options (`_` for `.` in the names), bootstrap included."""
    return client_config({"kafka.bootstrap.servers": "h:1",
                          **{f"kafka.{name.replace('_', '.')}": value for name, value in options.items()}})


@pytest.mark.parametrize(("mechanism", "module"), [("PLAIN", PLAIN_MODULE), ("SCRAM-SHA-512", SCRAM_MODULE),
                                                   ("scram-sha-256", SCRAM_MODULE)])
def test_a_jaas_line_becomes_the_sasl_login(mechanism: str, module: str) -> None:
    config = settings(sasl_mechanism=mechanism, sasl_jaas_config=f'{module} required username="alice" password="p w";')
    assert config == {"bootstrap.servers": "h:1", "sasl.mechanism": mechanism, "sasl.username": "alice",
                      "sasl.password": "p w"}


@pytest.mark.parametrize(("mechanism", "line", "complaint"), [
    ("PLAIN", f'{PLAIN_MODULE} username="alice" password="secret";', "must read"),
    ("PLAIN", f'{PLAIN_MODULE} required username="alice" password="secret"', "must read"),
    ("PLAIN", f'{PLAIN_MODULE} required username="alice";', "needs username and password"),
    ("PLAIN", f'{SCRAM_MODULE} required username="alice" password="secret";', "not the login module for PLAIN"),
    ("GSSAPI", f'{PLAIN_MODULE} required username="alice" password="secret";', "not the login module for GSSAPI"),
])
def test_a_malformed_jaas_line_is_an_option_error_that_does_not_show_it(mechanism: str, line: str,
                                                                         complaint: str) -> None:
    with pytest.raises(OptionError, match='"kafka.sasl.jaas.config"') as raised:
        settings(sasl_mechanism=mechanism, sasl_jaas_config=line)
    assert complaint in str(raised.value)
    assert "secret" not in str(raised.value)


def test_pem_stores_name_the_files_librdkafka_reads() -> None:
    config = settings(ssl_truststore_location="/ca.pem", ssl_truststore_type="PEM", ssl_keystore_location="/me.pem",
                      ssl_keystore_type="pem", ssl_key_password="k")
    assert config == {"bootstrap.servers": "h:1", "ssl.ca.location": "/ca.pem", "ssl.certificate.location": "/me.pem",
                      "ssl.key.location": "/me.pem", "ssl.key.password": "k"}


@pytest.mark.parametrize("store", ["truststore", "keystore"])
@pytest.mark.parametrize("kind", ["JKS", "PKCS12", None])
def test_stores_other_than_pem_are_refused(store: str, kind: str | None) -> None:
    options = {f"ssl_{store}_location": f"/{store}.jks"} | ({f"ssl_{store}_type": kind} if kind else {})
    with pytest.raises(OptionError, match=f'"kafka.ssl.{store}.type" is {kind or "JKS"}.*only PEM'):
        settings(**options)


@pytest.mark.parametrize(("given", "expected"), [("", "none"), (" ", "none"), ("https", "https")])
def test_javas_empty_endpoint_identification_is_librdkafkas_none(given: str, expected: str) -> None:
    assert settings(ssl_endpoint_identification_algorithm=given)["ssl.endpoint.identification.algorithm"] == expected


def test_librdkafka_names_win_over_java_names() -> None:
    config = settings(ssl_ca_location="/native.pem", ssl_truststore_location="/java.pem", ssl_truststore_type="PEM",
                      sasl_mechanism="PLAIN", sasl_username="bob",
                      sasl_jaas_config=f'{PLAIN_MODULE} required username="alice" password="pw";')
    assert (config["ssl.ca.location"], config["sasl.username"], config["sasl.password"]) == ("/native.pem", "bob", "pw")


def test_java_style_options_configure_the_producer_and_logbus_client(certs: Path) -> None:  # noqa: F811
    """No Java-only name is left for librdkafka, which refuses unknown names and loads the PEM
    files when the producer is made; logbus's own client builds its TLS context and login too."""
    config = settings(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                      sasl_jaas_config=f'{SCRAM_MODULE} required username="alice" password="pw";',
                      ssl_truststore_location=str(certs / "ca.pem"), ssl_truststore_type="PEM",
                      ssl_keystore_location=str(certs / "alice.pem"), ssl_keystore_type="PEM",
                      ssl_endpoint_identification_algorithm="")
    assert not JAVA_ONLY & set(config)
    Producer({**config, "log_level": 0})
    security = ClientSecurity.from_settings(config)
    assert security.tls is not None and not security.tls.check_hostname
    assert security.sasl is not None and (security.sasl.mechanism, security.sasl.username) == ("SCRAM-SHA-512", "alice")
