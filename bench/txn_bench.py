"""Transactions against one logbus broker, side by side with their non-transactional baselines.

    .venv/bin/python bench/txn_bench.py [--records 500000] [--reps 3] [--out bench/results/txn_bench.json]

1. Produce: transactions of 1,000 records of 100 B (confluent-kafka, `transactional.id`, one
   commit per 1,000 records) against the same records from an idempotent producer
   (`enable.idempotence`), alternating, into fresh one-partition topics (target >= 0.8x).
2. Consume: a topic filled with committed transactions of 1,000 records, read from the start
   with `isolation.level` read_committed against read_uncommitted, alternating (target >= 0.9x).
   A confluent-kafka consumer in batches of 10,000 (`consume`), so the client's per-record cost
   weighs as little as it can.

The broker's CPU seconds are recorded for each run. Loopback only; every loop is bounded by its
record count and a deadline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from logbus.testing import BrokerProcess, running_broker  # noqa: E402

RESULTS = os.path.join(os.path.dirname(__file__), "results")
TXN_RECORDS = 1000
VALUE = b"v" * 100
DEADLINE_S = 300
QUIET = {"log_level": 0}


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def new_topic(bootstrap: str) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


def produce_transactions(producer: Producer, topic: str, records: int) -> None:
    for _ in range(records // TXN_RECORDS):
        producer.begin_transaction()
        for _ in range(TXN_RECORDS):
            send(producer, topic)
        producer.commit_transaction(DEADLINE_S)


def produce_idempotent(producer: Producer, topic: str, records: int) -> None:
    for _ in range(records):
        send(producer, topic)
    if producer.flush(DEADLINE_S):
        raise RuntimeError("records left unacknowledged")


def send(producer: Producer, topic: str) -> None:
    while True:
        try:
            producer.produce(topic, VALUE, partition=0)
            return
        except BufferError:
            producer.poll(0.01)


def timed(broker: BrokerProcess, work: Callable[[], None], records: int) -> dict[str, float]:
    pid = broker.process.pid
    cpu_before, started = cpu_seconds(pid), time.perf_counter()
    work()
    elapsed = time.perf_counter() - started
    return {"records_s": round(records / elapsed), "broker_cpu_s": round(cpu_seconds(pid) - cpu_before, 2)}


def produce_run(broker: BrokerProcess, transactional: bool, records: int) -> dict[str, float]:
    topic = new_topic(broker.bootstrap)
    config: dict[str, Any] = {"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **QUIET}
    if transactional:
        producer = Producer({**config, "transactional.id": f"bench-{uuid.uuid4().hex[:6]}"})
        producer.init_transactions(30)
        return timed(broker, lambda: produce_transactions(producer, topic, records), records)
    producer = Producer({**config, "enable.idempotence": True})
    return timed(broker, lambda: produce_idempotent(producer, topic, records), records)


def consume_all(bootstrap: str, topic: str, isolation: str, records: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "isolation.level": isolation,
                         "enable.auto.commit": False, "fetch.max.bytes": 52428800, **QUIET})
    consumer.assign([TopicPartition(topic, 0, 0)])
    read, deadline = 0, time.monotonic() + DEADLINE_S
    try:
        while read < records:
            if time.monotonic() > deadline:
                raise RuntimeError(f"read {read} of {records} records")
            read += sum(1 for m in consumer.consume(10_000, 0.5) if m.error() is None)
    finally:
        consumer.close()


def compare(name: str, runs: dict[str, list[dict[str, float]]], subject: str, baseline: str) -> dict[str, Any]:
    rates = {kind: statistics.median(r["records_s"] for r in rs) for kind, rs in runs.items()}
    ratio = rates[subject] / rates[baseline]
    print(f"{name}: {subject} {rates[subject]:,.0f}/s, {baseline} {rates[baseline]:,.0f}/s, ratio {ratio:.2f}",
          flush=True)
    return {"median_records_s": rates, "ratio": round(ratio, 3), "runs": runs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(RESULTS, "txn_bench.json"))
    args = parser.parse_args()
    records = args.records // TXN_RECORDS * TXN_RECORDS
    results: dict[str, Any] = {"records": records, "value_bytes": len(VALUE), "txn_records": TXN_RECORDS}
    with running_broker() as broker:
        produced: dict[str, list[dict[str, float]]] = {"transactional": [], "idempotent": []}
        for _ in range(args.reps):
            for kind in produced:
                produced[kind].append(produce_run(broker, kind == "transactional", records))
        results["produce"] = compare("produce", produced, "transactional", "idempotent")
        topic = new_topic(broker.bootstrap)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                             "transactional.id": "bench-fill", **QUIET})
        producer.init_transactions(30)
        produce_transactions(producer, topic, records)
        consumed: dict[str, list[dict[str, float]]] = {"read_committed": [], "read_uncommitted": []}
        for _ in range(args.reps):
            for isolation in consumed:
                consumed[isolation].append(
                    timed(broker, lambda i=isolation: consume_all(broker.bootstrap, topic, i, records), records))
        results["consume"] = compare("consume", consumed, "read_committed", "read_uncommitted")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
