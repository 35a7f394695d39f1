"""Named listeners: Kafka's `listeners`, `listener.security.protocol.map`, `advertised.listeners`
and `inter.broker.listener.name`. The parsing is unit-tested in process; the rest runs real
broker processes (one broker with two listeners, a ZooKeeper cluster replicating over a
listener of its own) and real clients."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import METADATA, QUIET, consume_partition, produce_all, raw_request, wait_until
from kazoo.client import KazooClient

from logbus.cluster.metadata import BrokerInfo
from logbus.cluster.zk_data import decode_broker, encode_broker
from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.config import BrokerConfig, ConfigError
from logbus.security.listeners import ListenerEndpoint, listener_settings, parse_protocol_map
from logbus.testing import running_broker, running_cluster

FIND_COORDINATOR = 10
TWO_LISTENERS = {"listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
                 "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT"}


def settings(**config: str):  # noqa: ANN201 - ListenerSettings
    return listener_settings(BrokerConfig({k.replace("_", "."): v for k, v in config.items()}))


# ---------------------------------------------------------------------------- parsing (in process)


def test_listeners_take_names_from_the_protocol_map_case_insensitively() -> None:
    parsed = settings(listeners="plaintext://127.0.0.1:9092,SSL://[::1]:9093,internal://:0",
                      listener_security_protocol_map="PLAINTEXT:PLAINTEXT,SSL:SSL,Internal:ssl")
    assert parsed.listeners == (
        ListenerEndpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092),
        ListenerEndpoint("SSL", "SSL", "::1", 9093),
        ListenerEndpoint("INTERNAL", "SSL", "", 0),
    )
    assert str(parsed.listeners[1]) == "SSL://[::1]:9093"
    assert parsed.inter_broker_listener == "PLAINTEXT"
    assert parse_protocol_map("PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL") \
        == {p: p for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}


def test_without_listeners_the_broker_listens_on_one_plaintext_listener() -> None:
    assert settings().listeners == (ListenerEndpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092),)
    shorthand = listener_settings(BrokerConfig({"listeners": "SSL://:9093"}), ("0.0.0.0", 19092))
    assert shorthand.listeners == (ListenerEndpoint("PLAINTEXT", "PLAINTEXT", "0.0.0.0", 19092),)


def test_the_inter_broker_listener_is_named_or_follows_the_inter_broker_protocol() -> None:
    both = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"
    assert settings(listeners=both, inter_broker_listener_name="ssl").inter_broker_listener == "SSL"
    assert settings(listeners=both, security_inter_broker_protocol="SSL").inter_broker_listener == "SSL"
    assert settings(listeners=both).inter_broker_listener == "PLAINTEXT"


def test_each_listener_advertises_its_entry_or_its_bound_address() -> None:
    parsed = settings(listeners="PLAINTEXT://:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                      advertised_listeners="PLAINTEXT://public.example:19092,SSL://:0")
    bound = [e.at(e.host, port) for e, port in zip(parsed.listeners, (4001, 4002, 4003), strict=True)]
    assert [str(e) for e in parsed.advertise(bound, "me.local")] == [
        "PLAINTEXT://public.example:19092", "SSL://127.0.0.1:4002", "SASL_SSL://127.0.0.1:4003"]
    wildcard = settings(listeners="PLAINTEXT://0.0.0.0:0")
    assert [str(e) for e in wildcard.advertise([wildcard.listeners[0].at("0.0.0.0", 5)], "me.local")] \
        == ["PLAINTEXT://me.local:5"]


@pytest.mark.parametrize(("config", "message"), [
    ({"listeners": "PLAINTEXT://127.0.0.1:0,plaintext://127.0.0.1:0"}, "Each listener must have a different name"),
    ({"listeners": "PLAINTEXT://127.0.0.1:9100,SSL://127.0.0.1:9100"}, "Each listener must have a different port"),
    ({"listeners": "CLIENT://127.0.0.1:0"}, "No security protocol defined for listener CLIENT"),
    ({"listeners": "PLAINTEXT:127.0.0.1:0"}, "Unable to parse PLAINTEXT:127.0.0.1:0 to a broker endpoint"),
    ({"listeners": "PLAINTEXT://127.0.0.1:70000"}, "Invalid port 70000"),
    ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "unknown security protocol TLS"),
    ({"listener.security.protocol.map": "PLAINTEXT"}, "Map entry should be of form <key>:<value>"),
    ({"listeners": "SSL://127.0.0.1:0"}, "inter.broker.listener.name must be a listener name defined in"),
    ({"inter.broker.listener.name": "INTERNAL"}, "The valid options based on currently configured listeners "
                                                 "are PLAINTEXT"),
    ({"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"},
     "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."),
    ({"advertised.listeners": "SSL://127.0.0.1:9093"}, "advertised.listeners listener names must be equal to"),
    ({"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"}, "cannot use the nonroutable meta-address 0.0.0.0"),
])
def test_bad_listener_configs_are_refused_as_kafka_refuses_them(config: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        listener_settings(BrokerConfig(config))


def test_a_zookeeper_registration_holds_every_endpoint_in_kafkas_format() -> None:
    endpoints = (ListenerEndpoint("INTERNAL", "SSL", "10.0.0.1", 9094),
                 ListenerEndpoint("CLIENT", "PLAINTEXT", "broker.example", 9092))
    info = BrokerInfo(3, endpoints, "rack-a")
    value = json.loads(encode_broker(info))
    assert value["endpoints"] == ["INTERNAL://10.0.0.1:9094", "CLIENT://broker.example:9092"]
    assert value["listener_security_protocol_map"] == {"INTERNAL": "SSL", "CLIENT": "PLAINTEXT"}
    assert (value["host"], value["port"], value["rack"]) == ("broker.example", 9092, "rack-a")
    assert decode_broker(3, encode_broker(info)) == info
    legacy = decode_broker(4, json.dumps({"host": "old.example", "port": 9092}).encode())
    assert legacy.endpoint("PLAINTEXT") == ListenerEndpoint("PLAINTEXT", "PLAINTEXT", "old.example", 9092)


# ---------------------------------------------------------------------------- real brokers


def serve_refusal(tmp_path: Path, *settings_: str) -> tuple[int, str]:
    args = [arg for setting in settings_ for arg in ("--set", setting)]
    done = subprocess.run([sys.executable, "-m", "logbus", "serve", "--data-dir", str(tmp_path / "data"), *args],
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stderr


def test_serve_refuses_a_bad_listener_config_with_exit_code_2(tmp_path: Path) -> None:
    code, stderr = serve_refusal(tmp_path, "listeners=PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0")
    assert code == 2 and "No security protocol defined for listener INTERNAL" in stderr, stderr
    code, stderr = serve_refusal(tmp_path, "listeners=PLAINTEXT://127.0.0.1:0",
                                 "inter.broker.listener.name=REPLICATION")
    assert code == 2 and "inter.broker.listener.name must be a listener name" in stderr, stderr
    assert not (tmp_path / "data").exists()  # refused before anything was created


def brokers_seen(bootstrap: str) -> list[tuple[int, str, int]]:
    response = raw_request(bootstrap, METADATA, 12, topics=None, allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)
    return sorted((b.node_id, b.host, b.port) for b in response.brokers)


def test_a_broker_serves_clients_on_each_listener_and_answers_its_addresses() -> None:
    config = {**TWO_LISTENERS, "advertised.listeners": "INTERNAL://localhost:0"}
    with running_broker(config=config) as broker:
        plaintext, internal = broker.ports["PLAINTEXT"], broker.ports["INTERNAL"]
        assert plaintext != internal and broker.port == plaintext
        assert brokers_seen(f"127.0.0.1:{plaintext}") == [(0, "127.0.0.1", plaintext)]
        assert brokers_seen(f"127.0.0.1:{internal}") == [(0, "localhost", internal)]
        for port in (plaintext, internal):
            bootstrap = f"127.0.0.1:{port}"
            produce_all(bootstrap, f"t{port}", [(None, b"on %d" % port)])
            assert [m.value() for m in consume_partition(bootstrap, f"t{port}", 0, 1)] == [b"on %d" % port]
            client = Producer({"bootstrap.servers": bootstrap, **QUIET})
            assert {(b.host, b.port) for b in client.list_topics(timeout=10).brokers.values()} \
                == {("127.0.0.1" if port == plaintext else "localhost", port)}
            assert wait_until(lambda p=port: coordinator(f"127.0.0.1:{p}"), message="a coordinator") \
                == ("127.0.0.1" if port == plaintext else "localhost", port)
        restarted = broker.ports
        broker.stop()
        broker.start()
        assert broker.ports == restarted  # a restart binds the same ports again


def coordinator(bootstrap: str) -> tuple[str, int] | None:
    """FindCoordinator's answer for a group, None while the coordinator is not available yet."""
    response = raw_request(bootstrap, FIND_COORDINATOR, 3, key="g", key_type=0)
    return (response.host, response.port) if response.error_code == 0 else None



def test_a_cluster_replicates_over_its_inter_broker_listener(zookeeper: ZooKeeperServer) -> None:
    """The PLAINTEXT listener advertises a closed port: replication only works over INTERNAL."""
    config = {"listeners": "INTERNAL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
              "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
              "advertised.listeners": "PLAINTEXT://127.0.0.1:1", "inter.broker.listener.name": "INTERNAL"}
    with running_cluster(3, config, zookeeper) as cluster:
        internal = cluster.bootstrap  # every broker's first listener
        admin = AdminClient({"bootstrap.servers": internal, **QUIET})
        admin.create_topics([NewTopic("replicated", 1, 3)])["replicated"].result(20)

        def in_sync() -> bool:
            partition = Producer({"bootstrap.servers": internal, **QUIET}).list_topics(
                "replicated", timeout=5).topics["replicated"].partitions[0]
            return partition.leader >= 0 and sorted(partition.isrs) == [1, 2, 3]

        wait_until(in_sync, timeout=30, message="a leader and a full ISR")
        produce_all(internal, "replicated", [(None, b"%d" % i) for i in range(50)], acks="all")
        assert len(consume_partition(internal, "replicated", 0, 50)) == 50
        wait_until(lambda: all(_log_end(b.data_dir) > 0 for b in cluster.brokers.values()), timeout=30,
                   message="every replica fetched the records")
        one = cluster.brokers[1]
        assert brokers_seen(f"127.0.0.1:{one.ports['PLAINTEXT']}") == [(i, "127.0.0.1", 1) for i in (1, 2, 3)]
        assert brokers_seen(internal.split(",")[0]) == sorted(
            (i, "127.0.0.1", b.ports["INTERNAL"]) for i, b in cluster.brokers.items())
        registration = _registration(cluster.config["zookeeper.connect"], 2)
        assert registration["endpoints"] == [f"INTERNAL://127.0.0.1:{cluster.brokers[2].ports['INTERNAL']}",
                                             "PLAINTEXT://127.0.0.1:1"]
        assert registration["listener_security_protocol_map"] == {"INTERNAL": "PLAINTEXT", "PLAINTEXT": "PLAINTEXT"}


def _log_end(data_dir: str) -> int:
    """Bytes in the replicated partition's segments on one broker."""
    directory = Path(data_dir) / "replicated-0"
    return sum(f.stat().st_size for f in directory.glob("*.log")) if directory.is_dir() else 0


def _registration(connect: str, broker_id: int) -> dict:
    client = KazooClient(hosts=connect)
    client.start(timeout=10)
    try:
        raw, _ = client.get(f"/brokers/ids/{broker_id}")
        return json.loads(raw)
    finally:
        client.stop()
        client.close()
