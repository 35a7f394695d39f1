"""`logbus console` over plain HTTP, against a real broker with real data: every page carries its data
in the HTML, the message browser shows records as text, JSON and hex, the actions change the cluster
(and are refused without a CSRF token, a confirmation, in read-only mode, or for a group with
members), the console binds loopback only unless told otherwise, and it logs in with SASL SCRAM."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from helpers import QUIET, ConsoleProcess, produce_all, running_console, wait_until

from logbus.testing import BrokerProcess, running_broker

TOPIC = "orders"
EMPTY_GROUP = "settled-readers"
FUTURE_TIMEOUT_S = 15


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker({"metrics.port": "0"}) as started:
        yield started


@pytest.fixture(scope="module")
def seeded(broker: BrokerProcess) -> BrokerProcess:
    """`orders` (3 partitions, 30 records), and EMPTY_GROUP having committed 4 records of partition 0."""
    admin = admin_of(broker)
    admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(FUTURE_TIMEOUT_S)
    producer = Producer({"bootstrap.servers": broker.bootstrap, **QUIET})
    for i in range(10):
        for partition in range(3):
            producer.produce(TOPIC, key=f"k{i}".encode(), value=json.dumps({"n": i, "tag": "<b>x</b>"}).encode(),
                             partition=partition, headers=[("source", b"test"), ("raw", b"\x00\xff")])
    assert producer.flush(30) == 0
    commit(broker, EMPTY_GROUP, TOPIC, 0, 4)
    return broker


@pytest.fixture(scope="module")
def console(seeded: BrokerProcess) -> Iterator[ConsoleProcess]:
    with running_console(seeded.bootstrap, "--sample-interval", "0.5", "--metrics-url", seeded.metrics_url) as started:
        yield started


def admin_of(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})


def commit(broker: BrokerProcess, group: str, topic: str, partition: int, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, **QUIET})
    try:
        consumer.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
    finally:
        consumer.close()


def cells(page: str, table_id: str) -> list[list[str]]:
    """The text of each body row's cells of the table `table_id` (unescaped, tags stripped)."""
    body = page.split(f'<table id="{table_id}">', 1)[1].split("</table>", 1)[0].split("<tbody>", 1)[1]
    rows = re.findall(r"<tr>(.*?)</tr>", body, re.DOTALL)
    return [[html.unescape(re.sub(r"<[^>]+>", "", cell)) for cell in re.findall(r"<td>(.*?)</td>", row, re.DOTALL)]
            for row in rows]


def ok(console: ConsoleProcess, path: str) -> str:
    status, page = console.get(path)
    assert status == 200, page
    return page


# ---------------------------------------------------------------- pages


def test_cluster_page_counts_brokers_topics_partitions(console: ConsoleProcess, seeded: BrokerProcess) -> None:
    [row] = cells(ok(console, "/"), "cluster")
    cluster_id, controller, brokers, _racks, topics, partitions, under_replicated, offline, groups = row
    assert (controller, brokers, under_replicated, offline) == ("0", "1", "0", "0")
    assert int(topics) >= 1 and int(partitions) >= 3 and int(groups) >= 1 and cluster_id


def test_brokers_page_shows_the_broker_and_scraped_metrics(console: ConsoleProcess, seeded: BrokerProcess) -> None:
    page = ok(console, "/brokers")
    assert cells(page, "brokers") == [["0", "127.0.0.1", str(seeded.port), "-", "yes"]]
    [metrics_row] = cells(page, "metrics")
    assert metrics_row[0] == seeded.metrics_url and float(metrics_row[1]) >= 30  # messages in
    assert metrics_row[-1] == ""


def test_topics_page_lists_each_topic_with_partitions_and_size(console: ConsoleProcess) -> None:
    rows = {row[0]: row for row in cells(ok(console, "/topics"), "topics")}
    assert rows[TOPIC][1:5] == ["3", "1", "0", "0"]
    assert rows[TOPIC][5].endswith(("B", "KiB"))


def test_topic_page_shows_leader_replicas_isr_offsets_and_configs(console: ConsoleProcess) -> None:
    page = ok(console, f"/topics/{TOPIC}")
    assert cells(page, "partitions") == [[str(p), "0", "0", "0", "0", "10", cells(page, "partitions")[p][6]]
                                         for p in range(3)]
    configs = {row[0]: row[1] for row in cells(page, "configs")}
    assert configs["cleanup.policy"] == "delete"
    assert '<svg class="chart" id="produced"' in page


def test_group_pages_show_state_and_lag_of_end_minus_committed(console: ConsoleProcess) -> None:
    groups = {row[0]: row for row in cells(ok(console, "/groups"), "groups")}
    assert groups[EMPTY_GROUP][1] == "EMPTY"
    page = ok(console, f"/groups/{EMPTY_GROUP}")
    assert cells(page, "group")[0][0] == "EMPTY"
    assert cells(page, "offsets") == [[TOPIC, "0", "4", "10", "6", "-"]]
    assert '<svg class="chart" id="lag"' in page and 'id="reset-offsets"' in page
    wait_until(lambda: cells(ok(console, "/groups"), "groups") and
               {r[0]: r[2] for r in cells(ok(console, "/groups"), "groups")}[EMPTY_GROUP] == "6",
               timeout=10, message="the sampled lag on the groups page")


def test_a_consumer_protocol_group_shows_its_members_and_lag(console: ConsoleProcess, seeded: BrokerProcess) -> None:
    """A KIP-848 group (group.protocol=consumer) is listed and described like a classic one: its
    state, the server-side assignor, its member's assignment, its lag; and it is in the metrics."""
    group = "next-generation"
    consumer = Consumer({"bootstrap.servers": seeded.bootstrap, "group.id": group, "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **QUIET})
    try:
        consumer.subscribe([TOPIC])
        wait_until(lambda: (message := consumer.poll(0.5)) is not None and message.error() is None, timeout=30,
                   message="a record for the consumer-protocol group")
        consumer.commit(offsets=[TopicPartition(TOPIC, 1, 7)], asynchronous=False)
        wait_until(lambda: {r[0]: r[1] for r in cells(ok(console, "/groups"), "groups")}.get(group) == "STABLE",
                   timeout=20, message="the group listed as STABLE")
        page = ok(console, f"/groups/{group}")
        assert cells(page, "group")[0][:2] == ["STABLE", "uniform"]
        (member,) = cells(page, "members")
        assert member[3] == f"{TOPIC}-0, {TOPIC}-1, {TOPIC}-2"
        offsets = {row[1]: row for row in cells(page, "offsets")}
        assert offsets["1"][:5] == [TOPIC, "1", "7", "10", "3"]
        metrics = urllib.request.urlopen(seeded.metrics_url, timeout=10).read().decode()
        assert f'kafka_consumergroup_lag{{consumergroup="{group}",partition="1",topic="{TOPIC}"}} 3.0' in metrics
    finally:
        consumer.close()


def test_a_share_group_shows_its_members_start_offsets_and_lag(console: ConsoleProcess,
                                                               seeded: BrokerProcess) -> None:
    """A share group (KIP-932) is listed beside the consumer groups with its lag (DescribeShareGroupOffsets'),
    and its page shows its state, members, each partition's start offset and lag."""
    topic, group = f"queue-{uuid.uuid4().hex[:8]}", f"workers-{uuid.uuid4().hex[:8]}"
    admin = admin_of(seeded)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(FUTURE_TIMEOUT_S)
    earliest = ConfigResource(ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([earliest])[earliest].result(FUTURE_TIMEOUT_S)
    produce_all(seeded.bootstrap, topic, [(None, b"job")] * 6)  # all to one partition: no key, sticky
    consumer = ShareConsumer({"bootstrap.servers": seeded.bootstrap, "group.id": group, **QUIET})
    try:
        consumer.subscribe([topic])
        received: list[object] = []
        wait_until(lambda: received.extend(consumer.poll(0.5)) or len(received) >= 6, timeout=30,
                   message="the share consumer got every record")
        consumer.commit_sync()
        wait_until(lambda: [row[1] for row in cells(ok(console, "/groups"), "share-groups") if row[:1] == [group]]
                   == ["Stable"], timeout=20, message="the share group listed as Stable")  # the listing is cached
        page = ok(console, f"/share-groups/{group}")
        assert [cells(page, "share-group")[0][i] for i in (0, 3)] == ["Stable", "1"]
        (member,) = cells(page, "members")
        assert member[3] == f"{topic}-0, {topic}-1"
    finally:
        consumer.close()
    produce_all(seeded.bootstrap, topic, [(None, b"later")] * 4)
    wait_until(lambda: [row[1:] for row in cells(ok(console, "/groups"), "share-groups") if row[:1] == [group]]
               == [["Empty", "4"]], timeout=20, message="the share group listed as Empty with a lag of 4")
    page = ok(console, f"/share-groups/{group}")
    assert sum(int(row[3]) for row in cells(page, "share-offsets")) == 4 and not any(cells(page, "members"))


def test_unknown_topic_and_group_are_404(console: ConsoleProcess) -> None:
    for path in ("/topics/no-such-topic", "/groups/no-such-group", "/topics/no-such-topic/messages",
                 "/share-groups/no-such-group"):
        status, page = console.get(path)
        assert status == 404, (path, page)


# ---------------------------------------------------------------- message browser


def test_messages_show_key_value_headers_as_text_escaped(console: ConsoleProcess) -> None:
    page = ok(console, f"/topics/{TOPIC}/messages?partition=1&offset=2&limit=3&format=text")
    rows = cells(page, "records")
    assert [row[0] for row in rows] == ["2", "3", "4"]
    assert rows[0][2] == "k2" and json.loads(rows[0][3]) == {"n": 2, "tag": "<b>x</b>"}
    assert "source: test" in rows[0][4]
    assert "<b>x</b>" not in page  # the value is escaped, never markup


def test_messages_as_json_are_pretty_printed_and_as_hex_are_hex(console: ConsoleProcess) -> None:
    pretty = cells(ok(console, f"/topics/{TOPIC}/messages?partition=0&offset=0&limit=1&format=json"), "records")
    assert pretty[0][3] == json.dumps({"n": 0, "tag": "<b>x</b>"}, indent=2)
    hexed = cells(ok(console, f"/topics/{TOPIC}/messages?partition=0&offset=0&limit=1&format=hex"), "records")
    assert hexed[0][2] == b"k0".hex(" ") and "raw: 00 ff" in hexed[0][4]


def test_messages_from_a_timestamp_and_bounded_limit(console: ConsoleProcess) -> None:
    rows = cells(ok(console, f"/topics/{TOPIC}/messages?partition=2&timestamp=0&limit=100000"), "records")
    assert [row[0] for row in rows] == [str(i) for i in range(10)]
    status, _ = console.get(f"/topics/{TOPIC}/messages?partition=7")
    assert status == 404


# ---------------------------------------------------------------- actions


def test_create_alter_add_partitions_and_delete_a_topic(console: ConsoleProcess, seeded: BrokerProcess) -> None:
    name = f"made-{uuid.uuid4().hex[:8]}"
    token = console.csrf_token()
    status, page = console.post("/topics", {"csrf": token, "name": name, "partitions": "2", "replication_factor": "1",
                                            "configs": "retention.ms=60000", "confirm": "yes"})
    assert status == 200, page
    assert topic_configs(seeded, name)["retention.ms"] == "60000"
    status, page = console.post(f"/topics/{name}/configs", {"csrf": token, "configs": "retention.ms=120000",
                                                              "confirm": "yes"})
    assert status == 200 and topic_configs(seeded, name)["retention.ms"] == "120000", page
    status, page = console.post(f"/topics/{name}/partitions", {"csrf": token, "partitions": "4", "confirm": "yes"})
    assert status == 200, page
    assert len(cells(ok(console, f"/topics/{name}"), "partitions")) == 4
    status, page = console.post(f"/topics/{name}/delete", {"csrf": token, "confirm": "wrong-name"})
    assert status == 400 and name in admin_of(seeded).list_topics(timeout=10).topics
    status, page = console.post(f"/topics/{name}/delete", {"csrf": token, "confirm": name})
    assert status == 200, page
    wait_until(lambda: name not in admin_of(seeded).list_topics(timeout=10).topics, message="the topic deleted")


def topic_configs(broker: BrokerProcess, name: str) -> dict[str, str]:
    resource = ConfigResource(ResourceType.TOPIC, name)
    admin = admin_of(broker)  # kept referenced: a collected client fails its pending requests
    entries = admin.describe_configs([resource])[resource].result(FUTURE_TIMEOUT_S)
    return {entry.name: entry.value for entry in entries.values()}


def test_actions_need_the_csrf_token_and_a_confirmation(console: ConsoleProcess, seeded: BrokerProcess) -> None:
    status, _ = console.post("/topics", {"name": "no-token", "confirm": "yes"})
    assert status == 403
    status, _ = console.post("/topics", {"csrf": "guessed", "name": "bad-token", "confirm": "yes"})
    assert status == 403
    status, page = console.post("/topics", {"csrf": console.csrf_token(), "name": "unconfirmed"})
    assert status == 400 and "not confirmed" in page
    assert not {"no-token", "bad-token", "unconfirmed"} & set(admin_of(seeded).list_topics(timeout=10).topics)


def test_reset_offsets_of_an_empty_group_and_refused_with_members(console: ConsoleProcess,
                                                                  seeded: BrokerProcess) -> None:
    group = f"resettable-{uuid.uuid4().hex[:6]}"
    commit(seeded, group, TOPIC, 1, 9)
    token = console.csrf_token()
    status, page = console.post(f"/groups/{group}/reset-offsets", {"csrf": token, "topic": TOPIC, "to": "offset",
                                                                    "value": "3", "confirm": "yes"})
    assert status == 200, page
    assert committed(seeded, group) == {0: 3, 1: 3, 2: 3}
    member = Consumer({"bootstrap.servers": seeded.bootstrap, "group.id": group, **QUIET})
    try:
        member.subscribe([TOPIC])
        wait_until(lambda: member.poll(0.2) is not None or member.assignment(), timeout=20, message="assignment")
        status, page = console.post(f"/groups/{group}/reset-offsets", {"csrf": token, "topic": TOPIC,
                                                                        "to": "earliest", "confirm": "yes"})
        assert status == 409 and "active member" in page
    finally:
        member.close()


def committed(broker: BrokerProcess, group: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, **QUIET})
    try:
        found = consumer.committed([TopicPartition(TOPIC, p) for p in range(3)], timeout=10)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


# ---------------------------------------------------------------- read-only, binding, SASL


def test_read_only_hides_forms_and_refuses_every_post(seeded: BrokerProcess) -> None:
    with running_console(seeded.bootstrap, "--read-only") as read_only:
        page = ok(read_only, f"/topics/{TOPIC}")
        assert "read-only" in page and 'name="csrf"' not in page
        for path in ("/topics", f"/topics/{TOPIC}/delete", "/anything"):
            assert read_only.post(path, {"confirm": "yes"})[0] == 403


def test_a_non_loopback_host_is_refused_without_allow_remote() -> None:
    done = subprocess.run([sys.executable, "-m", "logbus", "console", "--host", "0.0.0.0"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "--allow-remote" in done.stderr


def test_the_console_logs_in_with_sasl_scram(tmp_path: Path) -> None:
    data = tmp_path / "data"
    password_file = tmp_path / "password"
    password_file.write_text("console-secret\n")
    done = subprocess.run([sys.executable, "-m", "logbus", "users", "set", "operator", "--password-file",
                           str(password_file), "--mechanism", "SCRAM-SHA-256", "--data-dir", str(data)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    config = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
              "sasl.enabled.mechanisms": "SCRAM-SHA-256"}
    with running_broker(config, data_dir=str(data)) as sasl_broker:
        produce_all(sasl_broker.bootstrap, "secured", [(b"k", b"v")])
        properties = tmp_path / "client.properties"
        properties.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                              "sasl.username=operator\nsasl.password=console-secret\n")
        sasl_bootstrap = f"127.0.0.1:{sasl_broker.ports['SASL_PLAINTEXT']}"
        with running_console(sasl_bootstrap, "--command-config", str(properties)) as console:
            assert "secured" in {row[0] for row in cells(ok(console, "/topics"), "topics")}
            assert cells(ok(console, "/topics/secured/messages?partition=0"), "records")[0][2:4] == ["k", "v"]
            sizes = {row[0]: row[5] for row in cells(ok(console, "/topics"), "topics")}
            assert sizes["secured"].endswith(("B", "KiB")), "sizes come through logbus's own client, logged in too"
        done = subprocess.run([sys.executable, "-m", "logbus", "log-dirs", "describe", "--bootstrap-server",
                               sasl_bootstrap, "--command-config", str(properties), "--topic-list", "secured"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and '"secured-0"' in done.stdout, done.stderr
