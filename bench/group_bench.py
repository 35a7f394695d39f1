"""Consumer group timings against one logbus broker, with confluent-kafka members.

    .venv/bin/python bench/group_bench.py [--members 10] [--partitions 20] [--commit-seconds 5]

1. Join: N members (one process each, connected beforehand) subscribe at once; time until the group is Stable with
   every member owning partitions and all partitions owned. Measured with
   `group.initial.rebalance.delay.ms` 0 and at Kafka's default 3000 (which the delay adds).
2. Death: one of the N members is killed with SIGKILL; time until the survivors own every
   partition again (the 6 s session timeout, then a rebalance).
3. OffsetCommit round trips per second: synchronous commits from one consumer, one at a time,
   and the broker's CPU seconds over that phase.
Results go to stdout and bench/results/group_bench.json. Loopback only; every wait has a deadline.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from logbus.testing import running_broker

RESULTS = os.path.join(os.path.dirname(__file__), "results")
SESSION_MS = 6000
DEADLINE_S = 120
QUIET = {"log_level": 0}

MEMBER = r"""
import json, sys
from confluent_kafka import Consumer
bootstrap, group, topic = sys.argv[1:4]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 6000,
                     "heartbeat.interval.ms": 1000, "enable.auto.commit": False, "log_level": 0})
consumer.list_topics(topic, timeout=30)
print("ready", flush=True)
sys.stdin.readline()  # "go": every member subscribes at the same moment
consumer.subscribe([topic], on_assign=lambda c, ps: print(json.dumps(sorted(p.partition for p in ps)), flush=True))
while True:
    consumer.poll(0.1)
"""


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Member:
    """A member process; `owned` is its latest assignment as it reported it."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", MEMBER, bootstrap, group, topic],
                                        stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
        self.ready = False
        self.owned: set[int] = set()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.startswith("ready"):
                self.ready = True
            else:
                self.owned = set(json.loads(line))

    def go(self) -> None:
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def wait_for(condition: object, what: str) -> float:
    """Seconds until `condition()` holds (polled every 5 ms)."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > DEADLINE_S:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.005)
    return time.monotonic() - started


def balanced(members: list[Member], partitions: int) -> bool:
    owned = [m.owned for m in members]
    return all(owned) and sorted(p for o in owned for p in o) == list(range(partitions))


def create_topic(bootstrap: str, partitions: int) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def join_and_death(delay_ms: int, count: int, partitions: int) -> dict[str, float]:
    with running_broker(config={"group.initial.rebalance.delay.ms": str(delay_ms)}) as broker:
        topic = create_topic(broker.bootstrap, partitions)
        group = f"join-{uuid.uuid4().hex[:8]}"
        members = [Member(broker.bootstrap, group, topic) for _ in range(count)]
        try:
            wait_for(lambda: all(m.ready for m in members), "members started")
            for member in members:
                member.go()
            joined = wait_for(lambda: balanced(members, partitions), f"{count} members balanced")
            victim, survivors = members[0], members[1:]
            victim.kill()
            moved = wait_for(lambda: balanced(survivors, partitions), "survivors balanced")
        finally:
            for member in members:
                member.stop()
    return {"join_s": round(joined, 3), "death_s": round(moved, 3)}


def commit_rate(seconds: float) -> dict[str, float]:
    with running_broker(config={"group.initial.rebalance.delay.ms": "0"}) as broker:
        topic = create_topic(broker.bootstrap, 1)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"commit-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False, **QUIET})
        try:
            consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)  # coordinator found
            cpu_before = cpu_seconds(broker.process.pid)
            started = time.monotonic()
            commits = 0
            while time.monotonic() - started < seconds:
                consumer.commit(offsets=[TopicPartition(topic, 0, commits, "bench")], asynchronous=False)
                commits += 1
            elapsed = time.monotonic() - started
            cpu = cpu_seconds(broker.process.pid) - cpu_before
        finally:
            consumer.close()
    return {"commits_per_s": round(commits / elapsed), "broker_cpu_us_per_commit": round(cpu / commits * 1e6, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--commit-seconds", type=float, default=5.0)
    args = parser.parse_args()
    results: dict[str, object] = {"members": args.members, "partitions": args.partitions, "session_ms": SESSION_MS}
    for delay in (0, 3000):
        results[f"initial_delay_{delay}ms"] = join_and_death(delay, args.members, args.partitions)
        print(f"initial delay {delay} ms: {results[f'initial_delay_{delay}ms']}", flush=True)
    results["offset_commit"] = commit_rate(args.commit_seconds)
    print(f"offset commit: {results['offset_commit']}")
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "group_bench.json"), "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
