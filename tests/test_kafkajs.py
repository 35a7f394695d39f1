"""kafkajs (Node) against a real broker: a fifth, independent implementation of the protocol.

kafkajs speaks older request versions than the librdkafka and Java clients (Produce v7,
Fetch v11, JoinGroup v5, Metadata v6, ...), so it exercises paths the other clients do not.
The scripts live in tests/kafkajs (kafkajs pinned exactly in package.json and its lock file);
`npm ci` installs it the first time. Each script prints one JSON line that the tests check.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from logbus.protocol.records import iter_headers
from logbus.testing import BrokerProcess, running_broker

SCRIPTS = os.path.join(os.path.dirname(__file__), "kafkajs")


@pytest.fixture(scope="session")
def kafkajs() -> str:
    """tests/kafkajs with its node_modules installed (`npm ci` from the lock file when missing)."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed (./dev installs the nodejs and npm packages)")
    # One install at a time (each pytest-xdist worker has its own session): `npm ci` first removes
    # node_modules, under the feet of a worker already running kafkajs.
    with open(os.path.join(SCRIPTS, ".install-lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.isfile(os.path.join(SCRIPTS, "node_modules", "kafkajs", "package.json")):
            assert shutil.which("npm") is not None, "node is installed but npm is not: cannot install kafkajs"
            installed = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=SCRIPTS, capture_output=True,
                                       text=True, timeout=300)
            assert installed.returncode == 0, f"npm ci failed in {SCRIPTS}:\n{installed.stderr[-3000:]}"
    return SCRIPTS


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker(config={"group.initial.rebalance.delay.ms": "0"}) as process:
        yield process


def node(kafkajs: str, script: str, *args: str, timeout: float = 120) -> Any:
    """Run one script; its JSON result (it fails the test with the script's stderr otherwise)."""
    done = subprocess.run(["node", script, *args], cwd=kafkajs, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{script} {' '.join(args)} failed:\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_kafkajs_admin_produce_consume_in_a_group_and_commit(kafkajs: str, broker: BrokerProcess) -> None:
    topic, group, count = unique("kafkajs"), unique("kafkajs-group"), 300
    first = node(kafkajs, "admin.js", broker.bootstrap, topic, group)
    assert first["created"] is True and first["listed"] is True
    assert sorted(p["id"] for p in first["partitions"]) == [0, 1, 2]
    assert all(p["leader"] == 0 and p["replicas"] == [0] for p in first["partitions"])
    assert first["described"] == [{"groupId": group, "state": "Dead", "protocolType": "", "members": 0}]

    sent = node(kafkajs, "produce.js", broker.bootstrap, topic, str(count))["sent"]
    assert all(s["errorCode"] == 0 for s in sent)

    consumed = node(kafkajs, "consume.js", broker.bootstrap, topic, group, str(count))
    records = consumed["records"]
    assert sorted(int(r["key"].removeprefix("key-")) for r in records) == list(range(count))  # each once
    for record in records:
        i = record["key"].removeprefix("key-")
        assert record["value"] == f"value-{i}"
        assert record["headers"] == {"index": i, "origin": "kafkajs"}
    per_partition = Counter(r["partition"] for r in records)
    for partition, n in per_partition.items():  # contiguous offsets from 0 in each partition
        assert sorted(int(r["offset"]) for r in records if r["partition"] == partition) == list(range(n))
    assert len(per_partition) > 1, "keyed records spread over the partitions"

    second = node(kafkajs, "admin.js", broker.bootstrap, topic, group)
    assert second["created"] is False  # createTopics of an existing topic
    assert {"groupId": group, "protocolType": "consumer"} in second["groups"]
    assert second["described"] == [{"groupId": group, "state": "Empty", "protocolType": "consumer", "members": 0}]
    committed = {p["partition"]: int(p["offset"]) for p in second["offsets"]}
    assert committed == {p: per_partition.get(p, -1) for p in range(3)}


def test_kafkajs_idempotent_producer_writes_each_record_once_with_a_producer_id(kafkajs: str) -> None:
    topic, count = unique("kafkajs-idempotent"), 500
    with running_broker(config={"num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}) as broker:
        sent = node(kafkajs, "produce.js", broker.bootstrap, topic, str(count), "idempotent")["sent"]
        assert [s["baseOffset"] for s in sent] == [str(i) for i in range(0, count, 100)]
        consumed = node(kafkajs, "consume.js", broker.bootstrap, topic, unique("group"), str(count))["records"]
        assert [r["key"] for r in consumed] == [f"key-{i}" for i in range(count)]
        log_dir = os.path.join(broker.data_dir, f"{topic}-0")
        segment = next(name for name in sorted(os.listdir(log_dir)) if name.endswith(".log"))
        with open(os.path.join(log_dir, segment), "rb") as handle:
            batches = list(iter_headers(handle.read()))
    assert len(batches) == count // 100
    assert len({b.producer_id for b in batches}) == 1 and batches[0].producer_id >= 0
    assert [b.base_sequence for b in batches] == list(range(0, count, 100))


def test_two_kafkajs_members_split_the_partitions(kafkajs: str, broker: BrokerProcess) -> None:
    topic, group, count = unique("kafkajs-shared"), unique("kafkajs-pair"), 200
    node(kafkajs, "admin.js", broker.bootstrap, topic, group)  # creates it with 3 partitions
    node(kafkajs, "produce.js", broker.bootstrap, topic, str(count))
    result = node(kafkajs, "group.js", broker.bootstrap, topic, group, "3", str(count))
    first, second = (a["partitions"] for a in result["assignments"])
    assert first and second and sorted(first + second) == [0, 1, 2]  # a rebalance gave each a share
    assert sorted(a["isLeader"] for a in result["assignments"]) == [False, True]
    assert result["read"] == count


def test_kafkajs_describe_configs_lists_entries_in_kafkas_order_with_its_synonyms(
        kafkajs: str, broker: BrokerProcess) -> None:
    """kafkajs' spec compares the entries by position: compression.type before retention.ms, and
    retention.ms without the log.retention.hours synonym Kafka does not send."""
    topic = unique("kafkajs-configs")
    described = node(kafkajs, "describe_configs.js", broker.bootstrap, topic)
    assert described["named"] == [{
        "configEntries": [
            {"configName": "compression.type", "configValue": "producer", "isDefault": True, "configSource": 5,
             "isSensitive": False, "readOnly": False,
             "configSynonyms": [{"configName": "compression.type", "configValue": "producer", "configSource": 5}]},
            {"configName": "retention.ms", "configValue": "604800000", "isDefault": True, "configSource": 5,
             "isSensitive": False, "readOnly": False, "configSynonyms": []},
        ],
        "errorCode": 0, "errorMessage": None, "resourceName": topic, "resourceType": 2,
    }]
    every = described["all"]  # an empty name list means all, in Kafka's (HashMap) order
    assert len(every) > 30 and every[0] == "compression.type"
    assert every.index("retention.ms") < every.index("segment.ms") < every.index("segment.index.bytes")
