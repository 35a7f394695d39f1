"""Produce throughput with the metrics endpoint on against off, in the same run.

    .venv/bin/python bench/metrics_bench.py [--records 500000] [--reps 3] [--out bench/results/metrics_bench.json]

Two brokers side by side, one with `metrics.port` set and one without. Each repetition produces
the same records of 100 B (confluent-kafka, `linger.ms` 5, `batch.size` 16 KiB as the Java
producer's default, so that requests are many and a per-request cost would show) into a fresh
one-partition topic of each broker in turn, alternating, so drift of a shared machine falls on
both; the ratio is the median of the repetitions' on/off ratios (target >= 0.97x).
While the metrics broker is produced to, its `/metrics` is scraped every SCRAPE_INTERVAL_S (a
pessimistic Prometheus: the usual interval is 15 s), so the cost of collecting counts too. The
broker's CPU seconds are recorded for each run. Loopback only; every loop is bounded by its
record count and a deadline. Last, the request path's own cost in this process: one produce
request's counter updates (a partition batch and the request's latency), timed over many.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import urllib.request
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.one_broker import DEADLINE_S, QUIET, new_topic, produce, timed, write_results  # noqa: E402
from logbus.metrics.counters import RequestTimes, TopicTraffic  # noqa: E402
from logbus.testing import BrokerProcess, running_broker  # noqa: E402

RESULTS = os.path.join(os.path.dirname(__file__), "results")
VALUE = b"v" * 100
SCRAPE_INTERVAL_S = 1.0
BATCH_BYTES = 16384


class Scraper(threading.Thread):
    """GET /metrics every SCRAPE_INTERVAL_S until stopped; counts the scrapes and their bytes."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.done = threading.Event()
        self.scrapes = 0
        self.bytes = 0

    def run(self) -> None:
        while not self.done.wait(SCRAPE_INTERVAL_S):
            with urllib.request.urlopen(self.url, timeout=10) as answer:
                self.bytes += len(answer.read())
            self.scrapes += 1


def produce_run(broker: BrokerProcess, records: int) -> dict[str, float]:
    config = {"bootstrap.servers": broker.bootstrap, **QUIET}
    topic = new_topic(config)
    scraper = Scraper(broker.metrics_url) if broker.metrics_url else None
    if scraper is not None:
        scraper.start()
    result: dict[str, float] = timed(
        broker.process.pid, lambda: produce(config, topic, records, VALUE, **{"batch.size": BATCH_BYTES}), records)
    if scraper is not None:
        scraper.done.set()
        scraper.join(DEADLINE_S)
        result["scrapes"] = scraper.scrapes
    return result


def counting_cost_us(requests: int = 1_000_000) -> float:
    """Microseconds per produce request of what the request path adds with metrics on."""
    traffic, times, names = TopicTraffic(), RequestTimes(), ("Produce",)
    started = time.perf_counter()
    for _ in range(requests):
        traffic.produced("topic", 150, 16000)
        times.record(names, (time.perf_counter() - started) * 1000)
    return (time.perf_counter() - started) / requests * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(RESULTS, "metrics_bench.json"))
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"metrics_on": [], "metrics_off": []}
    with running_broker({"metrics.port": "0"}) as on, running_broker() as off:
        brokers = {"metrics_on": on, "metrics_off": off}
        for _ in range(args.reps):
            for kind, broker in brokers.items():
                runs[kind].append(produce_run(broker, args.records))
    rates = {kind: statistics.median(r["records_s"] for r in rs) for kind, rs in runs.items()}
    ratio = statistics.median(on["records_s"] / off["records_s"]
                              for on, off in zip(runs["metrics_on"], runs["metrics_off"], strict=True))
    cpu = {kind: round(sum(r["broker_cpu_s"] for r in rs), 2) for kind, rs in runs.items()}
    cost = counting_cost_us()
    print(f"produce: metrics on {rates['metrics_on']:,.0f}/s, off {rates['metrics_off']:,.0f}/s, ratio {ratio:.3f}; "
          f"broker CPU on {cpu['metrics_on']} s, off {cpu['metrics_off']} s; counting {cost:.2f} us/request",
          flush=True)
    results: dict[str, Any] = {"records": args.records, "value_bytes": len(VALUE), "batch_bytes": BATCH_BYTES,
                               "scrape_interval_s": SCRAPE_INTERVAL_S, "median_records_s": rates,
                               "ratio": round(ratio, 3), "broker_cpu_s": cpu,
                               "counting_us_per_request": round(cost, 3), "runs": runs}
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
