"""TLS against PLAINTEXT on one logbus broker, in the same run.

    .venv/bin/python bench/tls_bench.py [--records 200000] [--reps 2] [--out bench/results/tls_bench.json]

One broker with two listeners, PLAINTEXT and SSL (certificates from `logbus certs`; TLS 1.3,
OpenSSL's default cipher, no client certificate), and confluent-kafka clients:

1. Produce: 1 KB records (`linger.ms` 5, acks=all on one broker) into a fresh one-partition
   topic per run, SSL and PLAINTEXT alternating (target: TLS >= 0.6x plaintext).
2. Consume: one topic filled once, read from the start in batches of 10,000 (`consume`) over
   SSL and PLAINTEXT alternating (target >= 0.6x). On loopback the broker copies fetched bytes
   on both listeners (`socket.sendfile=remote`), so the ratio is the cost of TLS itself.

The broker's CPU seconds are recorded for each run. Loopback only; every loop is bounded by its
record count and a deadline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from logbus.testing import BrokerProcess, running_broker  # noqa: E402

RESULTS = os.path.join(os.path.dirname(__file__), "results")
VALUE = b"v" * 1024
DEADLINE_S = 300
QUIET = {"log_level": 0}
LISTENERS = ("SSL", "PLAINTEXT")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def make_certs(directory: str) -> None:
    subprocess.run([sys.executable, "-m", "logbus", "certs", "--out", directory], check=True, capture_output=True)


def client_config(broker: BrokerProcess, listener: str, certs: str) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{broker.ports[listener]}", **QUIET}
    if listener == "SSL":
        config |= {"security.protocol": "SSL", "ssl.ca.location": os.path.join(certs, "ca.pem")}
    return config


def new_topic(config: dict[str, Any]) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config)  # referenced until the result is in: a collected client fails its futures
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


def produce(config: dict[str, Any], topic: str, records: int) -> None:
    producer = Producer({**config, "linger.ms": 5})
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, VALUE, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(DEADLINE_S):
        raise RuntimeError("records left unacknowledged")


def consume(config: dict[str, Any], topic: str, records: int) -> None:
    consumer = Consumer({**config, "group.id": "bench", "enable.auto.commit": False, "fetch.max.bytes": 52428800})
    consumer.assign([TopicPartition(topic, 0, 0)])
    read, deadline = 0, time.monotonic() + DEADLINE_S
    try:
        while read < records:
            if time.monotonic() > deadline:
                raise RuntimeError(f"read {read} of {records} records")
            read += sum(1 for m in consumer.consume(10_000, 0.5) if m.error() is None)
    finally:
        consumer.close()


def timed(broker: BrokerProcess, work: Callable[[], None], records: int) -> dict[str, float]:
    pid = broker.process.pid
    cpu_before, started = cpu_seconds(pid), time.perf_counter()
    work()
    elapsed = time.perf_counter() - started
    return {"records_s": round(records / elapsed), "mb_s": round(records * len(VALUE) / elapsed / 1e6, 1),
            "broker_cpu_s": round(cpu_seconds(pid) - cpu_before, 2)}


def compare(name: str, runs: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    rates = {kind: statistics.median(r["records_s"] for r in rs) for kind, rs in runs.items()}
    ratio = rates["SSL"] / rates["PLAINTEXT"]
    print(f"{name}: SSL {rates['SSL']:,.0f}/s, PLAINTEXT {rates['PLAINTEXT']:,.0f}/s, ratio {ratio:.2f}", flush=True)
    return {"median_records_s": rates, "ratio": round(ratio, 3), "runs": runs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(RESULTS, "tls_bench.json"))
    args = parser.parse_args()
    results: dict[str, Any] = {"records": args.records, "value_bytes": len(VALUE)}
    with tempfile.TemporaryDirectory(prefix="logbus-tls-bench-") as certs:
        make_certs(certs)
        config = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                  "ssl.keystore.location": os.path.join(certs, "broker.pem")}
        with running_broker(config=config) as broker:
            clients = {listener: client_config(broker, listener, certs) for listener in LISTENERS}
            produced: dict[str, list[dict[str, float]]] = {listener: [] for listener in LISTENERS}
            for _ in range(args.reps):
                for listener in LISTENERS:
                    topic = new_topic(clients["PLAINTEXT"])
                    produced[listener].append(
                        timed(broker, lambda c=clients[listener], t=topic: produce(c, t, args.records), args.records))
            results["produce"] = compare("produce", produced)
            topic = new_topic(clients["PLAINTEXT"])
            produce(clients["PLAINTEXT"], topic, args.records)
            consumed: dict[str, list[dict[str, float]]] = {listener: [] for listener in LISTENERS}
            for _ in range(args.reps):
                for listener in LISTENERS:
                    consumed[listener].append(
                        timed(broker, lambda c=clients[listener]: consume(c, topic, args.records), args.records))
            results["consume"] = compare("consume", consumed)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
