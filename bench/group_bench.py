"""Consumer group timings against one logbus broker, with confluent-kafka members.

    .venv/bin/python bench/group_bench.py [--members 10] [--partitions 20] [--commit-seconds 5]

1. Join: N members (one process each, connected beforehand) subscribe at once; time until the group is Stable with
   every member owning partitions and all partitions owned. Measured with
   `group.initial.rebalance.delay.ms` 0 and at Kafka's default 3000 (which the delay adds).
2. Death: one of the N members is killed with SIGKILL; time until the survivors own every
   partition again (the 6 s session timeout, then a rebalance).
3. OffsetCommit round trips per second: synchronous commits from one consumer, one at a time,
   and the broker's CPU seconds over that phase.
4. A 10th member joins 9 consuming 90 partitions (each member capped at --member-rate records/s
   from a backlog), classic (cooperative-sticky; and eager `range` for reference) versus the
   consumer protocol (KIP-848), 1 s heartbeats in all: seconds until the 10 own all 90
   partitions, and the records/s consumed meanwhile (and in the 3 s from the join) against the
   2 s before it (the dip), min/median/max of --repeats runs.
5. ConsumerGroupHeartbeat cost: 1,000 members across 100 groups heartbeat over 4 raw connections
   (pipelined, steady state: nothing changed); the broker's CPU per heartbeat, and per member per
   second at Kafka's default 5 s interval.
Results go to stdout and bench/results/group_bench.json. Loopback only; every wait has a deadline.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import struct
import subprocess
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kio.schema.consumer_group_heartbeat.v1.request import TopicPartitions  # noqa: E402
from kio.serial import entity_reader  # noqa: E402

from bench.raw_client import Client  # noqa: E402
from logbus.protocol import codec  # noqa: E402
from logbus.testing import running_broker  # noqa: E402

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


# A member that consumes at most `rate` records/s and reports what it owns and how many it consumed.
COUNTING_MEMBER = r"""
import json, sys, time
from confluent_kafka import Consumer
bootstrap, group, topic, protocol, rate = sys.argv[1:6]
strategy = {"classic": "cooperative-sticky", "classic-eager": "range"}.get(protocol)
config = {"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0,
          "group.protocol": "consumer" if strategy is None else "classic",
          "enable.auto.commit": True, "auto.offset.reset": "earliest"}
if strategy is not None:
    config.update({"partition.assignment.strategy": strategy, "session.timeout.ms": 6000,
                   "heartbeat.interval.ms": 1000})
consumer = Consumer(config)
consumer.list_topics(topic, timeout=30)
print("ready", flush=True)
sys.stdin.readline()
owned = set()
def report():
    print(json.dumps(sorted(owned)), flush=True)
def assigned(_c, partitions):
    owned.update(p.partition for p in partitions); report()
def revoked(_c, partitions):
    owned.difference_update(p.partition for p in partitions); report()
consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
count, due, reported, gap = 0, time.monotonic(), 0.0, 1 / float(rate)
while True:
    message = consumer.poll(0.02)
    if message is not None and message.error() is None:
        count += 1
        due = max(due + gap, time.monotonic() - 0.05)  # at most `rate`/s; idle time gives no credit
        time.sleep(max(due - time.monotonic(), 0))
    if time.monotonic() - reported >= 0.05:
        reported = time.monotonic()
        print(f"count {count}", flush=True)
"""


class CountingMember(Member):
    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str, rate: int) -> None:
        self.count = 0
        self.process = subprocess.Popen([sys.executable, "-c", COUNTING_MEMBER, bootstrap, group, topic, protocol,
                                         str(rate)], stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
        self.ready = False
        self.owned: set[int] = set()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.startswith("count "):
                self.count = int(line.split()[1])
            elif line.startswith("ready"):
                self.ready = True
            else:
                self.owned = set(json.loads(line))


def consumed(members: list[CountingMember]) -> int:
    return sum(m.count for m in members)


WINDOW_S = 3  # a fixed window from the join, less noisy than the rebalance's own


def tenth_member_joins(bootstrap: str, topic: str, protocol: str, partitions: int, rate: int) -> dict[str, float]:
    group = f"dip-{protocol}-{uuid.uuid4().hex[:8]}"
    members = [CountingMember(bootstrap, group, topic, protocol, rate) for _ in range(10)]
    nine, tenth = members[:9], members[9]
    try:
        wait_for(lambda: all(m.ready for m in members), "members started")
        for member in nine:
            member.go()
        wait_for(lambda: balanced(nine, partitions), "9 members balanced")
        time.sleep(3)  # the group settles and the consumers reach their rate
        before_count, before_at = consumed(nine), time.monotonic()
        time.sleep(2)
        baseline = (consumed(nine) - before_count) / (time.monotonic() - before_at)
        start_count, started = consumed(nine), time.monotonic()
        tenth.go()
        seconds = wait_for(lambda: balanced(members, partitions), "10 members balanced")
        during = (consumed(members) - start_count) / (time.monotonic() - started)
        time.sleep(max(WINDOW_S - (time.monotonic() - started), 0))
        window = (consumed(members) - start_count) / (time.monotonic() - started)
    finally:
        for member in members:
            member.stop()
    return {"rebalance_s": round(seconds, 3), "consumed_during": round(during * seconds),
            "baseline_per_s": round(baseline), "during_per_s": round(during),
            "dip_pct": round(100 * (1 - during / baseline), 1),
            "dip_3s_pct": round(100 * (1 - window / baseline), 1)}


def rebalance_dip(repeats: int, rate: int) -> dict[str, object]:
    partitions = 90
    config = {"group.initial.rebalance.delay.ms": "0", "group.consumer.min.heartbeat.interval.ms": "1000",
              "group.consumer.heartbeat.interval.ms": "1000"}
    with running_broker(config=config) as broker:
        topic = create_topic(broker.bootstrap, partitions)
        backlog = rate * 10 * 40  # 40 s of 10 members at their rate, per group (each reads it all)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, **QUIET})
        for i in range(backlog):
            while True:
                try:
                    producer.produce(topic, b"x" * 100, partition=i % partitions)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.1)
        assert producer.flush(300) == 0
        results: dict[str, object] = {}
        for protocol in ("classic", "classic-eager", "consumer"):
            runs = [tenth_member_joins(broker.bootstrap, topic, protocol, partitions, rate) for _ in range(repeats)]
            print(f"10th member, {protocol}: {runs}", flush=True)
            results[protocol] = {key: spread([run[key] for run in runs]) for key in runs[0]} | {"runs": runs}
    return results


def spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


HEARTBEAT = 68


def heartbeat_cost(groups: int, per_group: int, rounds: int) -> dict[str, float]:
    """Steady-state ConsumerGroupHeartbeats of groups x per_group members over 4 connections."""
    config = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "4"}
    with running_broker(config=config) as broker:
        topic = create_topic(broker.bootstrap, per_group)
        port = int(broker.bootstrap.rsplit(":", 1)[1])
        clients = [Client(port) for _ in range(4)]
        request_class = codec.request_class(HEARTBEAT, 1)
        members = [(f"g{g}", f"m{m}") for g in range(groups) for m in range(per_group)]
        epochs: dict[tuple[str, str], int] = {}
        owned: dict[tuple[str, str], tuple] = {}

        def request(member: tuple[str, str], steady: bool) -> object:
            epoch = epochs.get(member, 0)
            joining = epoch == 0
            return request_class(
                group_id=member[0], member_id=member[1], member_epoch=epoch, instance_id=None, rack_id=None,
                rebalance_timeout=datetime.timedelta(milliseconds=30_000 if joining else -1),
                subscribed_topic_names=(topic,) if joining else None, subscribed_topic_regex=None,
                server_assignor=None, topic_partitions=() if joining else (None if steady else owned.get(member, ())))

        def round_trip(steady: bool) -> int:
            """Every member heartbeats once (pipelined per connection); how many answers changed."""
            changed = 0
            for index, client in enumerate(clients):
                mine = members[index::len(clients)]
                payload = b"".join(_frame(client, HEARTBEAT, 1, request(m, steady)) for m in mine)
                client.sock.sendall(payload)
                for member in mine:
                    answer = _answer(client)
                    if answer.error_code == 0:
                        if answer.assignment is not None:
                            owned[member] = tuple(TopicPartitions(topic_id=t.topic_id, partitions=t.partitions)
                                                  for t in answer.assignment.topic_partitions)
                        changed += answer.member_epoch != epochs.get(member) or answer.assignment is not None
                        epochs[member] = answer.member_epoch
            return changed

        wait_for(lambda: _coordinator_ready(clients[0], members), "the coordinators")
        for _ in range(30):  # join, then reconcile until nothing changes
            if round_trip(steady=False) == 0:
                break
        cpu_before, started = cpu_seconds(broker.process.pid), time.monotonic()
        for _ in range(rounds):
            round_trip(steady=True)
        elapsed = time.monotonic() - started
        cpu = cpu_seconds(broker.process.pid) - cpu_before
        for client in clients:
            client.close()
    beats = rounds * len(members)
    per_beat_us = cpu / beats * 1e6
    return {"members": len(members), "heartbeats": beats, "heartbeats_per_s": round(beats / elapsed),
            "broker_cpu_us_per_heartbeat": round(per_beat_us, 1),
            "broker_cpu_us_per_member_per_s_at_5s": round(per_beat_us / 5, 1)}


def _frame(client: Client, api_key: int, version: int, request: object) -> bytes:
    client.correlation += 1
    body = struct.pack(">hhih", api_key, version, client.correlation, 5) + b"bench\x00" + b"".join(
        codec.encode(request))
    return struct.pack(">i", len(body)) + body


def _answer(client: Client) -> object:
    """The next ConsumerGroupHeartbeat answer (header v1: correlation id, no tags)."""
    size = struct.unpack(">i", client._exactly(4))[0]
    value, _ = entity_reader(codec.response_class(HEARTBEAT, 1))(client._exactly(size), 5)
    return value


def _coordinator_ready(client: Client, members: list[tuple[str, str]]) -> bool:
    """Has every group's coordinator loaded (FindCoordinator creates __consumer_offsets)?"""
    for group in sorted({g for g, _ in members}):
        answer = client.call(10, 3, codec.request_class(10, 3)(key=group, key_type=0))
        if struct.unpack_from(">h", answer, 9)[0] != 0:  # correlation, tags, throttle, error code
            return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--commit-seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3, help="runs of the 10th-member rebalance")
    parser.add_argument("--member-rate", type=int, default=1000, help="records/s each member consumes at most")
    parser.add_argument("--heartbeat-rounds", type=int, default=20)
    parser.add_argument("--only", choices=("join", "commit", "tenth", "heartbeat"), help="run one phase only")
    args = parser.parse_args()
    if args.only in ("tenth", "heartbeat"):
        phase = (rebalance_dip(args.repeats, args.member_rate) if args.only == "tenth"
                 else heartbeat_cost(100, 10, args.heartbeat_rounds))
        print(json.dumps(phase, indent=1))
        _save({args.only: phase, "load_average": os.getloadavg()}, f"group_bench_{args.only}.json")
        return 0
    results: dict[str, object] = {"members": args.members, "partitions": args.partitions, "session_ms": SESSION_MS}
    for delay in (0, 3000):
        results[f"initial_delay_{delay}ms"] = join_and_death(delay, args.members, args.partitions)
        print(f"initial delay {delay} ms: {results[f'initial_delay_{delay}ms']}", flush=True)
    results["offset_commit"] = commit_rate(args.commit_seconds)
    print(f"offset commit: {results['offset_commit']}")
    results["tenth_member"] = rebalance_dip(args.repeats, args.member_rate)
    results["heartbeat"] = heartbeat_cost(100, 10, args.heartbeat_rounds)
    print(f"heartbeats: {results['heartbeat']}")
    _save(results, "group_bench.json")
    return 0


def _save(results: dict[str, object], name: str) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, name), "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=1)


if __name__ == "__main__":
    sys.exit(main())
