"""`logbus transactions` (kafka-transactions.sh) run as a subprocess against a real broker, with
confluent-kafka transactional producers and hanging transactions written by hand.

The broker runs with `transaction.partition.verification.enable=false`, so a transactional batch
for a partition its coordinator was never told about is appended: a hanging transaction, the
kind `find-hanging` finds and `abort` ends.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import QUIET, raw_request, read_values, transactional_producer, wait_until
from test_validation import init_transactional_producer, produce

from logbus.protocol.records import TRANSACTIONAL_BIT, build_batch
from logbus.testing import BrokerProcess, free_test_port, running_broker, running_cluster

CLI_TIMEOUT_S = 60
NONE = 0
FIND_COORDINATOR, TRANSACTION_KEY = 10, 1

@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker({"transaction.partition.verification.enable": "false",
                         "transaction.state.log.num.partitions": "3"}) as started:
        yield started


def new_topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"cli-txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})  # kept alive until the future is done
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)
    return name


def transactions(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m logbus transactions --bootstrap-server BOOTSTRAP ARGS`; stdout and stderr as text."""
    return subprocess.run([sys.executable, "-m", "logbus", "transactions", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S)


def table(bootstrap: str, *args: str) -> list[dict[str, str]]:
    """The rows of the table a successful command prints, as {header: cell}."""
    result = transactions(bootstrap, *args)
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr}"
    lines = result.stdout.splitlines()
    assert all(line.endswith("\t") for line in lines), "Kafka's layout: every cell ends with a tab"
    headers, *rows = ([cell.strip() for cell in line.split("\t")[:-1]] for line in lines)
    return [dict(zip(headers, row, strict=True)) for row in rows]


def failed(result: subprocess.CompletedProcess[str], message: str) -> None:
    """A user-visible failure: exit 1, one line naming it, no traceback."""
    assert result.returncode == 1, f"exit {result.returncode}: {result.stdout} {result.stderr}"
    assert message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def hanging_producer(bootstrap: str) -> tuple[str, int, int]:
    """A transactional id initialized by hand: (id, producer id, epoch)."""
    transactional_id = f"hanging-{uuid.uuid4().hex[:6]}"
    return transactional_id, *init_transactional_producer(bootstrap, transactional_id)


def hanging_batch(bootstrap: str, topic: str, producer: tuple[str, int, int], sequence: int, value: bytes) -> int:
    """A transactional batch of `producer` in `topic`-0 that its coordinator never heard of; its offset."""
    transactional_id, producer_id, epoch = producer
    records = build_batch([(None, value)], int(time.time() * 1000), producer_id=producer_id, producer_epoch=epoch,
                          base_sequence=sequence, attributes=TRANSACTIONAL_BIT)
    result = produce(bootstrap, topic, records, transactional_id=transactional_id)
    assert result.error_code == NONE
    return result.base_offset


def end_offset(bootstrap: str, topic: str, isolation: str = "read_uncommitted") -> int:
    """The high watermark of `topic`-0, or for read_committed its last stable offset."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", "isolation.level": isolation, **QUIET})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def test_list_and_describe_follow_a_transaction_from_empty_to_complete_commit(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap, partitions=3)
    transactional_id = f"cli-{uuid.uuid4().hex[:6]}"
    producer = transactional_producer(broker.bootstrap, transactional_id)
    [empty] = table(broker.bootstrap, "describe", "--transactional-id", transactional_id)
    assert empty["TransactionState"] == "Empty"
    assert (empty["CurrentTransactionStartTimeMs"], empty["TransactionDurationMs"]) == ("None", "None"), \
        "no transaction runs: -1 on the wire"

    producer.begin_transaction()
    producer.produce(topic, b"open", partition=1)
    producer.produce(topic, b"open", partition=2)
    producer.flush(10)
    listed = {row["TransactionalId"]: row for row in table(broker.bootstrap, "list")}
    assert listed[transactional_id]["TransactionState"] == "Ongoing"
    after = subprocess.run([sys.executable, "-m", "logbus", "transactions", "list", "--bootstrap-server",
                            broker.bootstrap], capture_output=True, text=True, timeout=60, check=True)
    assert transactional_id in after.stdout, "--bootstrap-server after the sub-command, as logbus's other tools"
    assert listed[transactional_id]["Coordinator"] == "0"
    [ongoing] = table(broker.bootstrap, "describe", "--transactional-id", transactional_id)
    assert ongoing["CoordinatorId"] == "0" and ongoing["ProducerId"] == listed[transactional_id]["ProducerId"]
    assert ongoing["TransactionState"] == "Ongoing" and ongoing["TransactionTimeoutMs"] == "60000"
    assert ongoing["TopicPartitions"] == f"{topic}-1,{topic}-2"
    assert abs(int(ongoing["CurrentTransactionStartTimeMs"]) - time.time() * 1000) < 60_000
    assert int(ongoing["TransactionDurationMs"]) >= 0

    filtered = table(broker.bootstrap, "list", "--transactional-id-pattern", transactional_id[:6] + ".*")
    assert [row["TransactionalId"] for row in filtered] == [transactional_id]
    assert table(broker.bootstrap, "list", "--transactional-id-pattern", "no-such-.*") == []
    assert transactional_id not in {row["TransactionalId"]
                                    for row in table(broker.bootstrap, "list", "--duration-filter", "3600000")}

    producer.commit_transaction(20)
    wait_until(lambda: table(broker.bootstrap, "describe", "--transactional-id", transactional_id)[0][
        "TransactionState"] == "CompleteCommit", timeout=20, message="the markers written and the commit completed")


def test_errors_a_user_can_cause_are_one_line(broker: BrokerProcess) -> None:
    failed(transactions(broker.bootstrap, "describe", "--transactional-id", "no-such-id"),
           "Failed to describe transaction state of transactional-id `no-such-id`: TRANSACTIONAL_ID_NOT_FOUND")
    failed(transactions(f"127.0.0.1:{free_test_port()}", "list"), "Failed to list transactions: no broker reachable")
    failed(transactions(broker.bootstrap, "abort", "--topic", "t", "--partition", "0"),
           "The transaction to abort must be identified either with --start-offset or with --producer-id")
    failed(transactions(broker.bootstrap, "abort", "--topic", "t", "--partition", "0", "--producer-id", "7",
                        "--producer-epoch", "0"), "Missing required argument --coordinator-epoch")
    failed(transactions(broker.bootstrap, "abort", "--topic", "no-such-topic", "--partition", "0",
                        "--producer-id", "7", "--producer-epoch", "0", "--coordinator-epoch", "0"),
           "no-such-topic-0: UNKNOWN_TOPIC_OR_PARTITION")
    failed(transactions(broker.bootstrap, "find-hanging"),
           "The `find-hanging` command requires either --topic or --broker-id")
    failed(transactions(broker.bootstrap, "find-hanging", "--broker-id", "0", "--partition", "0"),
           "The --partition argument requires --topic to be provided")


def test_abort_with_a_named_producer_writes_its_marker(broker: BrokerProcess) -> None:
    """Kafka's form for brokers without DescribeProducers: the marker lands at the leader, and one
    with an older coordinator epoch than the partition saw is refused (TRANSACTION_COORDINATOR_FENCED)."""
    topic = new_topic(broker.bootstrap)
    producer = hanging_producer(broker.bootstrap)
    _transactional_id, producer_id, epoch = producer

    def abort(coordinator_epoch: int) -> subprocess.CompletedProcess[str]:
        return transactions(broker.bootstrap, "abort", "--topic", topic, "--partition", "0", "--producer-id",
                            str(producer_id), "--producer-epoch", str(epoch), "--coordinator-epoch",
                            str(coordinator_epoch))

    assert hanging_batch(broker.bootstrap, topic, producer, 0, b"first") == 0
    assert abort(-1).returncode == 0, "never marked: -1 is sent as 0, as Kafka's tool does"
    assert end_offset(broker.bootstrap, topic) == 2, "the ABORT marker follows the hanging batch"
    assert hanging_batch(broker.bootstrap, topic, producer, 1, b"second") == 2
    assert abort(5).returncode == 0
    assert hanging_batch(broker.bootstrap, topic, producer, 2, b"third") == 4
    failed(abort(4), f"Failed to abort transaction ({topic}-0 producerId={producer_id} producerEpoch={epoch} "
                     "coordinatorEpoch=4): TRANSACTION_COORDINATOR_FENCED")
    assert end_offset(broker.bootstrap, topic) == 5


def test_a_hanging_transaction_is_found_and_aborted_by_its_start_offset(broker: BrokerProcess) -> None:
    """A hanging batch at offset 1 and a live transaction after it: `find-hanging` names only the
    hanging one, `abort --start-offset` ends it, and read_committed readers get past it."""
    topic = new_topic(broker.bootstrap)
    plain = Producer({"bootstrap.servers": broker.bootstrap, **QUIET})
    plain.produce(topic, b"plain", partition=0)
    assert plain.flush(10) == 0
    hanging = hanging_producer(broker.bootstrap)
    hanging_id = hanging[1]
    assert hanging_batch(broker.bootstrap, topic, hanging, 0, b"hanging") == 1
    live = transactional_producer(broker.bootstrap, f"live-{uuid.uuid4().hex[:6]}")
    live.begin_transaction()
    live.produce(topic, b"live", partition=0)
    live.flush(10)

    producers = {row["ProducerId"]: row for row in table(
        broker.bootstrap, "describe-producers", "--topic", topic, "--partition", "0")}
    assert producers[str(hanging_id)]["CurrentTransactionStartOffset"] == "1"
    assert producers[str(hanging_id)]["LatestCoordinatorEpoch"] == "-1"
    assert table(broker.bootstrap, "describe-producers", "--topic", topic, "--partition", "0",
                 "--broker-id", "0") == list(producers.values())
    found = table(broker.bootstrap, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert [(row["ProducerId"], row["StartOffset"]) for row in found] == [(str(hanging_id), "1")]
    assert end_offset(broker.bootstrap, topic, "read_committed") == 1, "read_committed readers stop at it"

    failed(transactions(broker.bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "9"),
           f"Could not find any open transactions starting at offset 9 on partition {topic}-0")
    aborted = transactions(broker.bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "1")
    assert aborted.returncode == 0, aborted.stderr
    producers = {row["ProducerId"]: row for row in table(
        broker.bootstrap, "describe-producers", "--topic", topic, "--partition", "0")}
    assert producers[str(hanging_id)]["CurrentTransactionStartOffset"] == "None"
    assert table(broker.bootstrap, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0") == []

    live.commit_transaction(20)
    assert read_committed(broker.bootstrap, topic, until=b"live") == [b"plain", b"live"]


def read_committed(bootstrap: str, topic: str, until: bytes, timeout: float = 20.0) -> list[bytes]:
    return read_values(bootstrap, [(topic, 0)], lambda values, _: until in values, "read_committed", timeout)


def test_list_asks_every_broker_and_describe_asks_the_coordinator() -> None:
    """Two brokers, each coordinating one open transaction; the CLI is given only broker 1."""
    with running_cluster(2, {"transaction.state.log.replication.factor": "1",
                             "transaction.state.log.num.partitions": "4"}) as cluster:
        bootstrap = cluster.brokers[1].bootstrap
        topic = new_topic(bootstrap)
        by_coordinator = transactional_id_per_broker(bootstrap)
        producers = []  # kept open until the end
        for transactional_id in by_coordinator.values():
            producers.append(transactional_producer(bootstrap, transactional_id))
            producers[-1].begin_transaction()
            producers[-1].produce(topic, b"open", partition=0)
            producers[-1].flush(10)
        listed = {row["TransactionalId"]: row["Coordinator"] for row in table(bootstrap, "list")}
        assert listed == {transactional_id: str(broker) for broker, transactional_id in by_coordinator.items()}
        [described] = table(bootstrap, "describe", "--transactional-id", by_coordinator[2])
        assert (described["CoordinatorId"], described["TransactionState"]) == ("2", "Ongoing")


def transactional_id_per_broker(bootstrap: str) -> dict[int, str]:
    """A transactional id coordinated by each broker of a two-broker cluster (FindCoordinator by
    hand; the first one creates __transaction_state)."""
    def coordinator(transactional_id: str) -> int | None:
        answer = raw_request(bootstrap, FIND_COORDINATOR, 3, key=transactional_id, key_type=TRANSACTION_KEY)
        return answer.node_id if answer.error_code == NONE else None

    wait_until(lambda: coordinator("probe") is not None, timeout=30, message="__transaction_state")
    found: dict[int, str] = {}
    for candidate in (f"spread-{i}" for i in range(100)):
        found.setdefault(coordinator(candidate), candidate)
        if len(found) == 2:
            break
    assert set(found) == {1, 2}, found
    return found
