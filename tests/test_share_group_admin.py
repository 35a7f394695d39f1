"""The share-group admin APIs against a real broker with librdkafka `ShareConsumer` members:
DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92), as
Kafka 4.2 serves them (raw requests: confluent-kafka's admin client has no share-group calls), and
`logbus share-groups` (kafka-share-groups.sh) run on them, and the share-group metrics."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import RawConnection, create_topic, group_broker, wait_until
from kio.schema.alter_share_group_offsets.v0.request import (
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from kio.schema.delete_share_group_offsets.v0.request import DeleteShareGroupOffsetsRequestTopic
from kio.schema.describe_share_group_offsets.v1.request import (
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)
from kio.schema.errors import ErrorCode
from test_metrics import scrape, value
from test_share_groups import CONFIG, new_group, poll_until, produce, share_consumer

from logbus.cli.main import main
from logbus.testing import BrokerProcess

DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS, HEARTBEAT, DELETE_GROUPS = 90, 91, 92, 76, 42


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with group_broker({**CONFIG, "metrics.port": "0"}, HEARTBEAT) as process:
        yield process


def describe(connection: RawConnection, group: str, topics: dict[str, list[int]] | None = None) -> Any:
    wanted = None if topics is None else tuple(DescribeShareGroupOffsetsRequestTopic(topic_name=name, partitions=p)
                                               for name, p in topics.items())
    [described] = connection.call(DESCRIBE_OFFSETS, 1, groups=(
        DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=wanted),)).groups
    return described


def offsets(described: Any) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (start offset, lag) of a described group."""
    return {(t.topic_name, p.partition_index): (p.start_offset, p.lag) for t in described.topics for p in t.partitions}


def alter(connection: RawConnection, group: str, topic: str, starts: dict[int, int]) -> Any:
    return connection.call(ALTER_OFFSETS, 0, group_id=group, topics=(AlterShareGroupOffsetsRequestTopic(
        topic_name=topic, partitions=tuple(AlterShareGroupOffsetsRequestPartition(partition_index=index,
                                                                                  start_offset=start)
                                           for index, start in starts.items())),))


def delete_offsets(connection: RawConnection, group: str, *topics: str) -> Any:
    return connection.call(DELETE_OFFSETS, 0, group_id=group,
                           topics=tuple(DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics))


def consume_all(bootstrap: str, group: str, topic: str, count: int) -> list[tuple[int, int, bytes]]:
    """What one ShareConsumer gets until it has `count` records (accepted implicitly, then closed)."""
    consumer = share_consumer(bootstrap, group, topic)
    try:
        [received] = poll_until([consumer], lambda got: len(got[0]) >= count)
        consumer.commit_sync()
    finally:
        consumer.close()
    return received


def test_api_versions_advertise_the_admin_apis(broker: BrokerProcess) -> None:
    with RawConnection(broker.bootstrap) as connection:
        reply = connection.call(18, 3, client_software_name="t", client_software_version="1")
    ranges = {k.api_key: (k.min_version, k.max_version) for k in reply.api_keys}
    assert {key: ranges.get(key) for key in (90, 91, 92)} == {90: (0, 1), 91: (0, 0), 92: (0, 0)}


def test_describe_alter_and_delete_share_group_offsets(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 2)
    produce(broker.bootstrap, topic, [b"v%d" % n for n in range(20)], partitions=2)  # 10 on each partition
    group = new_group(broker.bootstrap)
    assert len(consume_all(broker.bootstrap, group, topic, 20)) == 20
    with RawConnection(broker.bootstrap) as connection:
        done = wait_until(lambda: (d := describe(connection, group)) and offsets(d) == {
            (topic, 0): (10, 0), (topic, 1): (10, 0)} and d, 30, message="every record delivered")
        assert done.error_code == ErrorCode.none and done.topics[0].topic_id is not None
        # a member in the group: no changes (the group as a whole answers)
        joined = connection.call(HEARTBEAT, 1, group_id=group, member_id="admin-m", member_epoch=0,
                                 subscribed_topic_names=(topic,))
        assert joined.error_code == ErrorCode.none
        assert alter(connection, group, topic, {0: 4}).error_code == ErrorCode.non_empty_group
        assert delete_offsets(connection, group, topic).error_code == ErrorCode.non_empty_group
        assert connection.call(DELETE_GROUPS, 2, groups_names=(group,)).results[0].error_code == \
            ErrorCode.non_empty_group
        connection.call(HEARTBEAT, 1, group_id=group, member_id="admin-m", member_epoch=-1)
        # empty: partition 0 starts over at 4, an unknown partition is refused on its own
        assert alter(connection, group, topic, {1: 10**12}).error_code == ErrorCode.none  # the log ends at 10
        assert offsets(describe(connection, group, {topic: [1]})) == {(topic, 1): (10, 0)}
        altered = alter(connection, group, topic, {0: 4, 7: 0})
        assert altered.error_code == ErrorCode.none
        assert [(p.partition_index, p.error_code) for p in altered.responses[0].partitions] == [
            (0, ErrorCode.none), (7, ErrorCode.unknown_topic_or_partition)]
        assert offsets(describe(connection, group, {topic: [0, 1, 5]})) == {
            (topic, 0): (4, 6), (topic, 1): (10, 0), (topic, 5): (-1, -1)}
    redelivered = consume_all(broker.bootstrap, group, topic, 6)
    assert sorted((partition, offset) for partition, offset, _ in redelivered) == [(0, n) for n in range(4, 10)]
    with RawConnection(broker.bootstrap) as connection:
        deleted = delete_offsets(connection, group, topic, "no-such-topic")
        assert deleted.error_code == ErrorCode.none
        assert [(t.topic_name, t.error_code) for t in deleted.responses] == [
            (topic, ErrorCode.none), ("no-such-topic", ErrorCode.unknown_topic_or_partition)]
        assert describe(connection, group).topics == ()
        assert offsets(describe(connection, group, {topic: [0]})) == {(topic, 0): (-1, -1)}
        again = delete_offsets(connection, group, topic).responses[0]
        assert again.error_code == ErrorCode.unknown_topic_or_partition  # no state left to delete
    # share.auto.offset.reset=earliest decides again: every record is delivered again
    assert len(consume_all(broker.bootstrap, group, topic, 20)) == 20
    with RawConnection(broker.bootstrap) as connection:
        wait_until(lambda: describe(connection, group).topics != (), 30, message="the group's state again")
        assert connection.call(DELETE_GROUPS, 2, groups_names=(group,)).results[0].error_code == ErrorCode.none
        rejoined = connection.call(HEARTBEAT, 1, group_id=group, member_id="admin-m", member_epoch=0,
                                   subscribed_topic_names=(topic,))
        assert rejoined.error_code == ErrorCode.none and rejoined.member_epoch == 1  # a new group
        assert describe(connection, group).topics == ()  # its state went with the deleted group


def test_unknown_groups_and_groups_of_another_type(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 1)
    with RawConnection(broker.bootstrap) as connection:
        assert alter(connection, "no-such-share-group", topic, {0: 0}).error_code == ErrorCode.group_id_not_found
        assert delete_offsets(connection, "no-such-share-group", topic).error_code == ErrorCode.group_id_not_found
        assert alter(connection, "", topic, {0: 0}).error_code == ErrorCode.invalid_group_id
        unknown = describe(connection, "no-such-share-group", {topic: [0]})  # as Kafka: no state, no error
        assert (unknown.error_code, offsets(unknown)) == (ErrorCode.none, {(topic, 0): (-1, -1)})
        assert describe(connection, "no-such-share-group", {}).topics == ()


# ---------------------------------------------------------------- logbus share-groups (kafka-share-groups.sh)


def share_groups(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`logbus share-groups ACTION --bootstrap-server BOOTSTRAP ARGS` run in this process (its
    `main`, as the command runs it; one test runs the command itself); its exit code and output."""
    action, *rest = args
    argv = ["share-groups", action, "--bootstrap-server", bootstrap, *rest]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def rows(bootstrap: str, *args: str) -> list[dict[str, str]]:
    """The table a successful command prints (after Kafka's leading blank line), as {header: cell}."""
    result = share_groups(bootstrap, *args)
    assert result.returncode == 0, f"exit {result.returncode}: {result.stdout} {result.stderr}"
    headers, *lines = [line.replace("(ID)", "ID").split()
                       for line in result.stdout.splitlines() if line.strip()]
    return [dict(zip(headers, line, strict=True)) for line in lines]


def test_share_groups_cli_with_share_consumers(broker: BrokerProcess) -> None:
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 2)
    produce(bootstrap, topic, [b"v%d" % n for n in range(20)], partitions=2)
    group = new_group(bootstrap)
    consumers = [share_consumer(bootstrap, group, topic) for _ in range(2)]
    try:
        poll_until(consumers, lambda got: sum(map(len, got)) >= 20)
        for consumer in consumers:
            consumer.commit_sync()
        listed = subprocess.run([sys.executable, "-m", "logbus", "share-groups", "list", "--bootstrap-server",
                                 bootstrap], capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0 and group in listed.stdout.split()
        assert {"GROUP": group, "STATE": "Stable"} in rows(bootstrap, "list", "--state")
        members = rows(bootstrap, "describe", "--group", group, "--members")
        assert len(members) == 2 and all(m["ASSIGNMENT"].startswith(f"{topic}:") for m in members)
        [state] = rows(bootstrap, "describe", "--group", group, "--state", "--verbose")
        assert (state["STATE"], state["#MEMBERS"]) == ("Stable", "2")
        busy = share_groups(bootstrap, "reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                            "--execute")
        assert busy.returncode == 2 and f"Share group '{group}' is not empty." in busy.stderr
    finally:
        for consumer in consumers:
            consumer.close()

    def described() -> list[tuple[str, str, str]]:
        return [(r["PARTITION"], r["START-OFFSET"], r["LAG"]) for r in rows(bootstrap, "describe", "--group", group)]
    wait_until(lambda: described() == [("0", "10", "0"), ("1", "10", "0")], 30, message="every record delivered")
    planned = rows(bootstrap, "reset-offsets", "--group", group, "--topic", f"{topic}:0", "--to-offset", "3")
    assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in planned] == [("0", "3")]
    assert described() == [("0", "10", "0"), ("1", "10", "0")]  # a dry run by default
    assert [r["NEW-OFFSET"] for r in rows(bootstrap, "reset-offsets", "--group", group, "--all-topics",
                                          "--by-duration", "PT1H")] == ["0", "0"]
    assert [r["NEW-OFFSET"] for r in rows(bootstrap, "reset-offsets", "--group", group, "--topic", topic,
                                          "--to-datetime", "2999-01-01T00:00:00")] == ["10", "10"]
    executed = rows(bootstrap, "reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert [(r["GROUP"], r["TOPIC"], r["NEW-OFFSET"]) for r in executed] == [(group, topic, "0")] * 2
    assert described() == [("0", "0", "10"), ("1", "0", "10")]
    assert len(consume_all(bootstrap, group, topic, 20)) == 20  # every record again
    wait_until(lambda: described() == [("0", "10", "0"), ("1", "10", "0")], 30, message="delivered again")

    assert rows(bootstrap, "delete", "--group", group, "--delete-offsets", "--topic", topic) == [
        {"TOPIC": topic, "STATUS": "Successful"}]
    assert described() == []
    deleted = share_groups(bootstrap, "delete", "--group", group)
    assert deleted.returncode == 0 and f"Deletion of requested share groups ('{group}') was successful." in \
        deleted.stdout
    assert group not in share_groups(bootstrap, "list").stdout.split()
    missing = share_groups(bootstrap, "describe", "--group", "no-such-share-group")
    assert missing.returncode == 1 and "Share group 'no-such-share-group' does not exist." in missing.stderr
    unknown = share_groups(bootstrap, "delete", "--group", "no-such-share-group")
    assert unknown.returncode == 1 and "Group 'no-such-share-group' is not a share group." in unknown.stdout


# ---------------------------------------------------------------- metrics


def test_share_group_metrics(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 1)
    produce(broker.bootstrap, topic, [b"m%d" % n for n in range(10)], partitions=1)
    group = new_group(broker.bootstrap)
    before = scrape(broker)
    assert len(consume_all(broker.bootstrap, group, topic, 10)) == 10
    lag = {"sharegroup": group, "topic": topic, "partition": "0"}
    wait_until(lambda: scrape(broker).get(("kafka_sharegroup_lag", frozenset(lag.items()))) == 0, 30,
               message="every record delivered: lag 0")
    produce(broker.bootstrap, topic, [b"n%d" % n for n in range(5)], partitions=1)
    after = scrape(broker)
    assert value(after, "kafka_sharegroup_lag", **lag) == 5
    accepted = "kafka_server_sharegroupmetrics_recordacknowledgements_total"
    assert value(after, accepted, acktype="Accept") - value(before, accepted, acktype="Accept") == 10
    assert value(after, accepted, acktype="Reject") == value(before, accepted, acktype="Reject")
    for name in ("totalsharefetchrequests", "totalshareacknowledgementrequests"):
        counter = f"kafka_server_brokertopicmetrics_{name}_total"
        assert value(after, counter, topic=topic) >= 1 and value(after, counter) > value(before, counter)
    assert value(after, "kafka_server_brokertopicmetrics_failedsharefetchrequests_total", topic=topic) == 0
    assert value(after, "kafka_server_groupcoordinatormetrics_group_count", protocol="share") >= 1
    assert value(after, "kafka_server_groupcoordinatormetrics_share_group_count", state="Empty") >= 1
    rebalances = "kafka_server_groupcoordinatormetrics_share_group_rebalance_count"
    assert value(after, rebalances) >= value(before, rebalances) + 2  # the member joined, then left
