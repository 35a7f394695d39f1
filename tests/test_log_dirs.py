"""Several log dirs (`log.dirs`): placement, restart, DescribeLogDirs and AlterReplicaLogDirs
(with kafka-python's admin client), for one data dir and for several."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import kafka.errors as kafka_errors
import pytest
from confluent_kafka import Producer
from helpers import (
    LIST_OFFSETS,
    QUIET,
    RawConnection,
    ballast,
    consume_partition,
    produce_all,
    raw_produce,
    raw_request,
)
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient, NewTopic
from kio.schema.describe_log_dirs.v1 import request as describe_log_dirs_v1
from kio.schema.list_offsets.v1 import request as list_offsets_v1
from test_bad_requests import fetch_error
from test_metrics import scrape
from test_storage import record_batch

from logbus.config import BrokerConfig, log_config
from logbus.protocol.records import validate_batches
from logbus.storage.manager import DataDirRefusedError, LogManager
from logbus.testing import BrokerProcess, running_broker

DESCRIBE_LOG_DIRS = 35
KAFKA_STORAGE_ERROR = 56


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker() as started:
        yield started


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield client
    client.close()


def test_describe_log_dirs_reports_the_data_dir_and_partition_sizes(broker: BrokerProcess,
                                                                    admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("sized", 1, 1), NewTopic("other", 2, 1)])
    produce_all(broker.bootstrap, "sized", [(None, b"x" * 1000)] * 5)
    [answer] = admin.describe_log_dirs()
    assert answer["broker"] == 0
    [log_dir] = answer["log_dirs"]
    assert log_dir["error_code"] == 0
    assert log_dir["log_dir"] == os.path.abspath(broker.data_dir)
    volume = os.statvfs(broker.data_dir)
    assert log_dir["total_bytes"] == volume.f_blocks * volume.f_frsize
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
    sizes = {(t["name"], p["partition_index"]): p["partition_size"]
             for t in log_dir["topics"] for p in t["partitions"]}
    assert sizes[("sized", 0)] > 5000 and sizes[("other", 0)] == sizes[("other", 1)] == 0

    [only] = admin.describe_log_dirs(topic_partitions={"other": [1, 7], "never-created": [0]})
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in only["log_dirs"][0]["topics"]] == [
        ("other", [1])
    ], "only the named partitions this broker hosts"


def test_describe_log_dirs_v1(broker: BrokerProcess) -> None:
    response = raw_request(broker.bootstrap, DESCRIBE_LOG_DIRS, 1, topics=(
        describe_log_dirs_v1.DescribableLogDirTopic(topic="absent", partitions=(0,)),
    ))
    here = os.path.abspath(broker.data_dir)
    assert [(r.error_code, r.log_dir, r.topics) for r in response.results] == [(0, here, ())]


def test_alter_replica_log_dirs(broker: BrokerProcess, admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("moved", 1, 1)])
    here = os.path.abspath(broker.data_dir)
    answers = admin.alter_replica_log_dirs({
        TopicPartitionReplica("moved", 0, 0): here,
        TopicPartitionReplica("moved", 5, 0): here,
        TopicPartitionReplica("elsewhere", 0, 0): "/not/a/log/dir",
    })
    assert answers == {
        TopicPartitionReplica("moved", 0, 0): kafka_errors.NoError,
        TopicPartitionReplica("moved", 5, 0): kafka_errors.ReplicaNotAvailableError,
        TopicPartitionReplica("elsewhere", 0, 0): kafka_errors.LogDirNotFoundError,
    }


# ---------------------------------------------------------------------- several log dirs (log.dirs=A,B)


def partition_dirs(log_dir: str) -> set[tuple[str, int]]:
    """The `<topic>-<partition>` dirs in a log dir (internal topics left out)."""
    return {(name.rsplit("-", 1)[0], int(name.rsplit("-", 1)[1])) for name in os.listdir(log_dir)
            if os.path.isdir(os.path.join(log_dir, name)) and not name.startswith("__")}


def produce_to_partitions(bootstrap: str, records: dict[tuple[str, int], list[bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **QUIET})
    for (topic, partition), values in records.items():
        for value in values:
            producer.produce(topic, value=value, partition=partition)
    assert producer.flush(30) == 0, "records left unacknowledged"


def test_log_dirs_spread_partitions_and_survive_a_restart(tmp_path: Path) -> None:
    """New partitions go to the log dir holding the fewest (ties: the first listed); each log dir
    has its own meta.properties, checkpoints and clean-shutdown marker; after a restart each
    partition is found where it is, DescribeLogDirs lists both dirs, AlterReplicaLogDirs answers."""
    first, second = str(tmp_path / "a"), str(tmp_path / "b")
    with running_broker(config={"log.dirs": f"{first},{second}"}) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            admin.create_topics([NewTopic("spread", 4, 1)])
            admin.create_topics([NewTopic("more", 3, 1)])
        finally:
            admin.close()
        in_first = {("spread", 0), ("spread", 2), ("more", 0), ("more", 2)}
        in_second = {("spread", 1), ("spread", 3), ("more", 1)}
        assert (partition_dirs(first), partition_dirs(second)) == (in_first, in_second)
        records = {key: [b"%s-%d-%d" % (key[0].encode(), key[1], i) for i in range(3)] for key in in_first | in_second}
        produce_to_partitions(broker.bootstrap, records)
        for log_dir in (first, second):
            with open(os.path.join(log_dir, "meta.properties"), encoding="utf-8") as handle:
                assert "broker.id=0" in handle.read()
        assert os.path.exists(os.path.join(first, "logbus-metadata.json"))
        assert not os.path.exists(os.path.join(second, "logbus-metadata.json"))

        assert broker.stop() == 0
        for log_dir, held in ((first, in_first), (second, in_second)):
            assert os.path.exists(os.path.join(log_dir, ".kafka_cleanshutdown"))
            with open(os.path.join(log_dir, "recovery-point-offset-checkpoint"), encoding="utf-8") as handle:
                listed = {(t, int(p)) for t, p, _ in (line.split() for line in handle.read().splitlines()[2:])}
            assert listed == held, f"{log_dir}'s checkpoint lists the partitions in {log_dir}"

        broker.restart()
        assert (partition_dirs(first), partition_dirs(second)) == (in_first, in_second)
        for (topic, partition), values in records.items():
            assert [m.value() for m in consume_partition(broker.bootstrap, topic, partition, 3)] == values
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            [answer] = admin.describe_log_dirs()
            assert [entry["log_dir"] for entry in answer["log_dirs"]] == [first, second]
            described = {
                entry["log_dir"]: {(t["name"], p["partition_index"]) for t in entry["topics"] for p in t["partitions"]
                                   if not t["name"].startswith("__")}
                for entry in answer["log_dirs"]
            }
            assert described == {first: in_first, second: in_second}
            assert all(entry["error_code"] == 0 and entry["total_bytes"] > 0 for entry in answer["log_dirs"])
            assert all(p["partition_size"] > 0 for entry in answer["log_dirs"] for t in entry["topics"]
                       for p in t["partitions"] if not t["name"].startswith("__"))

            answers = admin.alter_replica_log_dirs({
                TopicPartitionReplica("spread", 0, 0): first,
                TopicPartitionReplica("more", 0, 0): os.path.join(second, "..", "b"),
                TopicPartitionReplica("spread", 1, 0): str(tmp_path / "c"),
                TopicPartitionReplica("later", 0, 0): second,
            })
            assert answers == {
                TopicPartitionReplica("spread", 0, 0): kafka_errors.NoError,
                TopicPartitionReplica("more", 0, 0): kafka_errors.KafkaStorageError,  # a move: not supported
                TopicPartitionReplica("spread", 1, 0): kafka_errors.LogDirNotFoundError,
                TopicPartitionReplica("later", 0, 0): kafka_errors.ReplicaNotAvailableError,
            }
            assert (partition_dirs(first), partition_dirs(second)) == (in_first, in_second), "nothing moved"
            admin.create_topics([NewTopic("later", 1, 1)])
            assert ("later", 0) in partition_dirs(second), "created in the dir AlterReplicaLogDirs named for it"
        finally:
            admin.close()


def test_serve_refuses_a_log_dir_it_cannot_use(tmp_path: Path) -> None:
    """A log dir that cannot be used stops the start with a one-line message naming it."""
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where a log dir should be")
    process = subprocess.run(
        [sys.executable, "-m", "logbus", "serve", "--host", "127.0.0.1", "--port", "0",
         "--set", f"log.dirs={tmp_path / 'fine'},{blocked}"],
        capture_output=True, text=True, timeout=60,
    )
    assert process.returncode == 1
    assert f"log dir {blocked} cannot be used" in process.stderr


# ---------------------------------------------------------------------- LogManager placement (in process)


def test_log_manager_places_new_partitions_on_the_least_loaded_dir(tmp_path: Path) -> None:
    dirs = [str(tmp_path / name) for name in ("a", "b", "c")]
    config = log_config(BrokerConfig(), {})

    async def first_run() -> dict[tuple[str, int], str]:
        manager = LogManager(dirs)
        manager.lock()
        manager.open(0, "cluster")
        os.makedirs(os.path.join(dirs[2], "old-0"))  # as if there since before: counted at the next open
        for index in range(5):
            manager.load_log("t", index, config)
        placed = {key: os.path.dirname(log_.directory) for key, log_ in manager.logs.items()}
        assert list(placed.values()) == [dirs[0], dirs[1], dirs[2], dirs[0], dirs[1]]
        manager.prefer_log_dir("u", 0, dirs[2])
        assert os.path.dirname(manager.load_log("u", 0, config).directory) == dirs[2]
        await manager.shutdown()
        return {**placed, ("u", 0): dirs[2]}

    placed = asyncio.run(first_run())

    async def second_run() -> None:
        manager = LogManager(dirs)
        manager.lock()
        manager.open(0, "cluster")
        assert manager.clean_shutdown
        assert manager.partitions_per_dir() == {dirs[0]: 2, dirs[1]: 2, dirs[2]: 3}
        for (topic, index), log_dir in placed.items():
            assert os.path.dirname(manager.load_log(topic, index, config).directory) == log_dir
        assert os.path.dirname(manager.load_log("t", 5, config).directory) == dirs[0], "fewest, first listed"
        await manager.shutdown()

    asyncio.run(second_run())
    with pytest.raises(DataDirRefusedError, match="cluster.id=cluster"):
        LogManager(dirs).open(0, "another-cluster")


def test_log_manager_refuses_a_partition_in_two_log_dirs(tmp_path: Path) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    for log_dir in dirs:
        os.makedirs(os.path.join(log_dir, "twice-0"))
    with pytest.raises(DataDirRefusedError, match="twice-0 is in two log dirs"):
        LogManager(dirs).open(0, "cluster")


def test_a_partition_moved_while_stopped_is_found_and_keeps_its_log_start(tmp_path: Path) -> None:
    """Moving `<topic>-<partition>` to another log dir by hand while stopped (the documented way to
    move one) keeps its records and its log start offset; the checkpoints follow it."""
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    config = log_config(BrokerConfig(), {})

    async def run(check: Callable[[LogManager], None]) -> None:
        manager = LogManager(dirs)
        manager.lock()
        manager.open(0, "cluster")
        check(manager)
        await manager.shutdown()

    def write(manager: LogManager) -> None:
        log_ = manager.load_log("moved", 0, config)
        for value in (b"a", b"b", b"c"):
            raw = record_batch(value)
            log_.append(bytearray(raw), validate_batches(raw), 0)
        log_.delete_records_before(2)

    asyncio.run(run(write))
    shutil.move(os.path.join(dirs[0], "moved-0"), os.path.join(dirs[1], "moved-0"))

    def reopen(manager: LogManager) -> None:
        log_ = manager.load_log("moved", 0, config)
        assert os.path.dirname(log_.directory) == dirs[1]
        assert (log_.log_start_offset, log_.log_end_offset) == (2, 3)

    asyncio.run(run(reopen))
    for log_dir, expected in ((dirs[0], "0\n0\n"), (dirs[1], "0\n1\nmoved 0 2\n")):
        with open(os.path.join(log_dir, "log-start-offset-checkpoint"), encoding="utf-8") as handle:
            assert handle.read() == expected


def test_a_failed_log_dir_goes_offline_until_a_restart_and_the_other_keeps_serving(small_disk: str,
                                                                                     tmp_path: Path) -> None:
    """KIP-112 on one broker: a full disk takes its log dir offline (KAFKA_STORAGE_ERROR for its
    partitions, in DescribeLogDirs, `log-dirs describe` and the offline-dir gauge) while the other
    dir is served; freeing space changes nothing until a restart, which recovers the dir."""
    healthy, small = str(tmp_path / "healthy"), os.path.join(small_disk, "data")
    with running_broker(config={"log.dirs": f"{healthy},{small}", "metrics.port": "0"}) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            admin.create_topics([NewTopic("kept", 1, 1)])
            admin.create_topics([NewTopic("doomed", 1, 1)])
        finally:
            admin.close()
        assert (partition_dirs(healthy), partition_dirs(small)) == ({("kept", 0)}, {("doomed", 0)})
        produce_all(broker.bootstrap, "doomed", [(None, b"before")])
        weight = ballast(small_disk, 0)
        with RawConnection(broker.bootstrap) as connection:
            assert raw_produce(connection, "doomed", record_batch(b"x" * 20_000)) == (KAFKA_STORAGE_ERROR, -1)
        assert fetch_error(broker.bootstrap, "doomed", 0) == KAFKA_STORAGE_ERROR
        assert list_offsets_error(broker.bootstrap, "doomed") == KAFKA_STORAGE_ERROR
        assert scrape(broker)[("kafka_log_logmanager_offlinelogdirectorycount", frozenset())] == 1
        described = raw_request(broker.bootstrap, DESCRIBE_LOG_DIRS, 1, topics=None)
        assert [(r.log_dir, r.error_code) for r in described.results] == [(healthy, 0), (small, KAFKA_STORAGE_ERROR)]
        lines = subprocess.run([sys.executable, "-m", "logbus", "log-dirs", "describe", "--bootstrap-server",
                                broker.bootstrap], capture_output=True, text=True, timeout=60, check=True).stdout
        dirs = json.loads(lines.splitlines()[-1])["brokers"][0]["logDirs"]
        assert [(d["logDir"], d["error"]) for d in dirs] == [
            (healthy, None), (small, "org.apache.kafka.common.errors.KafkaStorageException")]

        produce_all(broker.bootstrap, "kept", [(None, b"still served")])
        assert [m.value() for m in consume_partition(broker.bootstrap, "kept", 0, 1)] == [b"still served"]
        os.unlink(weight)
        with RawConnection(broker.bootstrap) as connection:
            assert raw_produce(connection, "doomed", record_batch(b"later")) == (KAFKA_STORAGE_ERROR, -1), \
                "offline until a restart"

        assert broker.stop() == 0
        assert not os.path.exists(os.path.join(small, ".kafka_cleanshutdown")), "an offline dir is recovered"
        broker.restart()
        produce_all(broker.bootstrap, "doomed", [(None, b"after")])
        assert [m.value() for m in consume_partition(broker.bootstrap, "doomed", 0, 2)] == [b"before", b"after"]
        assert scrape(broker)[("kafka_log_logmanager_offlinelogdirectorycount", frozenset())] == 0


def list_offsets_error(bootstrap: str, topic: str) -> int:
    response = raw_request(bootstrap, LIST_OFFSETS, 1, replica_id=-1, topics=(list_offsets_v1.ListOffsetsTopic(
        name=topic, partitions=(list_offsets_v1.ListOffsetsPartition(partition_index=0, timestamp=-2),)),))
    return int(response.topics[0].partitions[0].error_code)


def test_log_manager_takes_a_log_dir_offline_after_a_disk_error(tmp_path: Path) -> None:
    """An OSError in a log's append takes its dir offline: its logs leave the manager, the
    listeners hear which partitions went, no new partition, checkpoint or clean-shutdown marker
    goes there; the other dir goes on."""
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    config = log_config(BrokerConfig(), {})

    async def scenario() -> None:
        manager = LogManager(dirs)
        manager.lock()
        manager.open(0, "cluster")
        heard: list[tuple[str, list[tuple[str, int]]]] = []
        manager.add_dir_failure_listener(lambda log_dir, keys: heard.append((log_dir, keys)))
        failing, kept = manager.load_log("t", 0, config), manager.load_log("t", 1, config)
        failing.active_segment.append = _disk_full
        raw = bytearray(record_batch(b"v"))
        with pytest.raises(OSError):
            failing.append(raw, validate_batches(raw), 0)
        assert heard == [(dirs[0], [("t", 0)])] and manager.offline_dirs == {dirs[0]: "No space left on device"}
        assert list(manager.logs) == [("t", 1)] and kept.log_end_offset == 0
        assert os.path.dirname(manager.load_log("t", 2, config).directory) == dirs[1], "only online dirs"
        manager.fail_dir(dirs[0], OSError(5, "again"))
        assert len(heard) == 1, "once"
        await manager.shutdown()

    asyncio.run(scenario())
    assert [os.path.exists(os.path.join(d, ".kafka_cleanshutdown")) for d in dirs] == [False, True]
    assert not os.path.exists(os.path.join(dirs[0], "recovery-point-offset-checkpoint"))


def _disk_full(*_args: object) -> None:
    raise OSError(28, "No space left on device")
