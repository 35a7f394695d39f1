"""Transactions against one logbus broker, side by side with their non-transactional baselines.

    .venv/bin/python bench/txn_bench.py [--records 500000] [--reps 3] [--out bench/results/txn_bench.json]

1. Produce: transactions of 1,000 records of 100 B (confluent-kafka, `transactional.id`, one
   commit per 1,000 records) against the same records from an idempotent producer
   (`enable.idempotence`), alternating, into fresh one-partition topics (target >= 0.8x).
2. Consume: a topic filled with committed transactions of 1,000 records, read from the start
   with `isolation.level` read_committed against read_uncommitted, alternating (target >= 0.9x).
   A confluent-kafka consumer in batches of 10,000 (`consume`), so the client's per-record cost
   weighs as little as it can.

The broker's and the client's CPU seconds are recorded for each run. Loopback only; every loop
is bounded by its record count and a deadline.

The produce `ceiling`: the ratio this client could reach against a broker that answered the
requests a commit waits on (AddPartitionsToTxn, Produce, EndTxn: librdkafka sends them one after
another) in no time. Their handling times come from the broker's own request metrics
(`kafka_network_requestmetrics_totaltimems`, decoding to encoded answer); a transactional run
less them is what the client itself needs (its produce loop, its threads, loopback), and the
idempotent run, the client's own loop, stays what it is.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import urllib.request
import uuid
from typing import Any

from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.one_broker import DEADLINE_S, QUIET, consume, flush, new_topic, send, timed, write_results  # noqa: E402
from logbus.testing import BrokerProcess, running_broker  # noqa: E402

RESULTS = os.path.join(os.path.dirname(__file__), "results")
TXN_RECORDS = 1000
VALUE = b"v" * 100
COMMIT_PATH = ("AddPartitionsToTxn", "Produce", "EndTxn")  # what commit_transaction waits on, in turn


def produce_transactions(producer: Producer, topic: str, records: int) -> None:
    for _ in range(records // TXN_RECORDS):
        producer.begin_transaction()
        for _ in range(TXN_RECORDS):
            send(producer, topic, VALUE)
        producer.commit_transaction(DEADLINE_S)


def produce_idempotent(producer: Producer, topic: str, records: int) -> None:
    for _ in range(records):
        send(producer, topic, VALUE)
    flush(producer)


def client(broker: BrokerProcess) -> dict[str, Any]:
    return {"bootstrap.servers": broker.bootstrap, **QUIET}


def produce_run(broker: BrokerProcess, transactional: bool, records: int) -> dict[str, float]:
    topic = new_topic(client(broker))
    config: dict[str, Any] = {**client(broker), "linger.ms": 5}
    if transactional:
        producer = Producer({**config, "transactional.id": f"bench-{uuid.uuid4().hex[:6]}"})
        producer.init_transactions(30)
        before = commit_path_ms(broker)
        run = timed(broker.process.pid, lambda: produce_transactions(producer, topic, records), records)
        return {**run, "commit_path_s": round((commit_path_ms(broker) - before) / 1000, 3)}
    producer = Producer({**config, "enable.idempotence": True})
    return timed(broker.process.pid, lambda: produce_idempotent(producer, topic, records), records)


def commit_path_ms(broker: BrokerProcess) -> float:
    """Milliseconds the broker has spent handling the requests on a commit's path, so far."""
    assert broker.metrics_url is not None
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as answer:
        text = answer.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text)
               if family.name == "kafka_network_requestmetrics_totaltimems"
               for sample in family.samples
               if sample.name.endswith("_sum") and sample.labels.get("request") in COMMIT_PATH)


def compare(name: str, runs: dict[str, list[dict[str, float]]], subject: str, baseline: str) -> dict[str, Any]:
    rates = {kind: statistics.median(r["records_s"] for r in rs) for kind, rs in runs.items()}
    ratio = rates[subject] / rates[baseline]
    print(f"{name}: {subject} {rates[subject]:,.0f}/s, {baseline} {rates[baseline]:,.0f}/s, ratio {ratio:.2f}",
          flush=True)
    return {"median_records_s": rates, "ratio": round(ratio, 3), "runs": runs}


def produce_ceiling(runs: dict[str, list[dict[str, float]]], records: int) -> float:
    """The transactional/idempotent ratio against a broker answering a commit's requests in no
    time (module docstring); the median of the runs paired in turn."""
    per_txn_ms = 1000 * TXN_RECORDS / records
    ceilings, client_ms, handling_ms = [], [], []
    for transactional, idempotent in zip(runs["transactional"], runs["idempotent"], strict=True):
        client_s = records / transactional["records_s"] - transactional["commit_path_s"]
        ceilings.append(records / idempotent["records_s"] / client_s)
        client_ms.append(client_s * per_txn_ms)
        handling_ms.append(transactional["commit_path_s"] * per_txn_ms)
    ceiling = statistics.median(ceilings)
    print(f"produce against a broker answering a commit's requests in no time: at best {ceiling:.2f}x (per "
          f"transaction of {TXN_RECORDS}: the client's own {statistics.median(client_ms):.2f} ms, the broker's "
          f"handling {statistics.median(handling_ms):.2f} ms)", flush=True)
    return round(ceiling, 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(RESULTS, "txn_bench.json"))
    args = parser.parse_args()
    records = args.records // TXN_RECORDS * TXN_RECORDS
    results: dict[str, Any] = {"records": records, "value_bytes": len(VALUE), "txn_records": TXN_RECORDS}
    with running_broker(config={"metrics.port": "0"}) as broker:
        produced: dict[str, list[dict[str, float]]] = {"transactional": [], "idempotent": []}
        for _ in range(args.reps):
            for kind in produced:
                produced[kind].append(produce_run(broker, kind == "transactional", records))
        results["produce"] = compare("produce", produced, "transactional", "idempotent")
        results["produce"]["ceiling"] = produce_ceiling(produced, records)
        topic = new_topic(client(broker))
        producer = Producer({**client(broker), "linger.ms": 5, "transactional.id": "bench-fill"})
        producer.init_transactions(30)
        produce_transactions(producer, topic, records)
        consumed: dict[str, list[dict[str, float]]] = {"read_committed": [], "read_uncommitted": []}
        for _ in range(args.reps):
            for isolation in consumed:
                consumed[isolation].append(timed(broker.process.pid, lambda i=isolation: consume(
                    client(broker), topic, records, **{"isolation.level": i}), records))
        results["consume"] = compare("consume", consumed, "read_committed", "read_uncommitted")
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
