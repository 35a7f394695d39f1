"""Page times of `logbus console` with 1,000 topics and 50 consumer groups (target: every page < 1 s).

    .venv/bin/python bench/console_bench.py [--topics 1000] [--groups 50] [--reps 5] [--out PATH.json]

One broker; the topics (one partition each, one record each) are created with CreateTopics in
batches; each group commits an offset on one topic. Then a console process starts (sampling every
5 s, its default) and each page is fetched: once cold (the first request, metadata not cached) and
`--reps` times warm, one after another; the median and the maximum are reported. Loopback only;
every loop is bounded by its count and a deadline.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.one_broker import DEADLINE_S, QUIET, write_results  # noqa: E402
from logbus.testing import free_test_port, running_broker  # noqa: E402

RESULTS = os.path.join(os.path.dirname(__file__), "results")
CREATE_BATCH = 100
TARGET_S = 1.0


def create_topics(bootstrap: str, count: int) -> list[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    names = [f"bench-topic-{i:04d}" for i in range(count)]
    for start in range(0, count, CREATE_BATCH):
        futures = admin.create_topics([NewTopic(name, 1, 1) for name in names[start:start + CREATE_BATCH]])
        for future in futures.values():
            future.result(DEADLINE_S)
    producer = Producer({"bootstrap.servers": bootstrap, **QUIET})
    for name in names:
        producer.produce(name, b"record")
    if producer.flush(DEADLINE_S):
        raise RuntimeError("records left unacknowledged")
    return names


def commit_groups(bootstrap: str, topics: list[str], count: int) -> list[str]:
    groups = [f"bench-group-{i:02d}" for i in range(count)]
    for i, group in enumerate(groups):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
        try:
            consumer.commit(offsets=[TopicPartition(topics[i % len(topics)], 0, 1)], asynchronous=False)
        finally:
            consumer.close()
    return groups


def fetch_s(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=DEADLINE_S) as answer:
        answer.read()
        if answer.status != 200:
            raise RuntimeError(f"{url}: HTTP {answer.status}")
    return time.perf_counter() - started


def wait_for(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            fetch_s(url)
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the console did not answer at {url}")


def time_pages(base: str, pages: list[str], reps: int) -> dict[str, dict[str, float]]:
    times: dict[str, dict[str, float]] = {}
    for page in pages:
        cold = fetch_s(base + page)
        warm = [fetch_s(base + page) for _ in range(reps)]
        times[page] = {"cold_s": round(cold, 4), "median_s": round(statistics.median(warm), 4),
                       "max_s": round(max(warm), 4)}
        print(f"{page:40s} cold {cold * 1000:7.1f} ms  median {statistics.median(warm) * 1000:7.1f} ms  "
              f"max {max(warm) * 1000:7.1f} ms", flush=True)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(RESULTS, "console_bench.json"))
    args = parser.parse_args()
    with running_broker({"auto.create.topics.enable": "false"}) as broker:
        began = time.perf_counter()
        topics = create_topics(broker.bootstrap, args.topics)
        groups = commit_groups(broker.bootstrap, topics, args.groups)
        print(f"{len(topics)} topics and {len(groups)} groups in {time.perf_counter() - began:.1f} s", flush=True)
        port = free_test_port()
        console = subprocess.Popen([sys.executable, "-m", "logbus", "console", "--bootstrap-server", broker.bootstrap,
                                    "--port", str(port)], stdin=subprocess.DEVNULL)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_for(base + "/static/console.css")
            pages = ["/", "/topics", f"/topics/{topics[0]}", "/groups", f"/groups/{groups[0]}", "/brokers"]
            times = time_pages(base, pages, args.reps)
        finally:
            console.terminate()
            console.wait(DEADLINE_S)
    worst = max(max(t["cold_s"], t["max_s"]) for t in times.values())
    print(f"slowest page load {worst * 1000:.0f} ms (target < {TARGET_S * 1000:.0f} ms)", flush=True)
    results: dict[str, Any] = {"topics": args.topics, "groups": args.groups, "reps": args.reps,
                               "target_s": TARGET_S, "worst_s": round(worst, 4), "met": worst < TARGET_S,
                               "pages": times}
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
