"""Share group (KIP-932) throughput and redelivery against one logbus broker, beside a consumer group.

    .venv/bin/python bench/share_bench.py [--records 50000] [--reps 3] [--lock-ms 1000]

1. Throughput: a 4-partition topic holds --records records of 100 B. 1, 4 and 16 `ShareConsumer`s
   (one process each, implicit acknowledgement) of a fresh share group read them all; then 1 and 4
   classic `Consumer`s of a fresh consumer group (the baseline, in the same broker and time
   window). Records/s from the first record any member received to the last, and the broker's
   CPU microseconds per record over the run (joining included).
2. Redelivery after a lock expires: with the group's `share.record.lock.duration.ms` at --lock-ms,
   member A acquires a new record (raw ShareFetch) and never acknowledges it; member B waits in a
   ShareFetch on the same partition. The time from A's acquisition to B's answer holding the
   record (delivery count 2), and that time less the lock duration.
min/median/max over --reps runs, with the load average beside each figure. Results go to stdout
and bench/results/share_bench.json. Loopback only; every wait has a deadline.
"""

from __future__ import annotations

import datetime
import json
import os
import select
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic  # noqa: E402
from confluent_kafka.admin import ResourceType as AdminResourceType  # noqa: E402
from kio.serial import entity_reader  # noqa: E402

from bench.one_broker import QUIET, cpu_seconds, produce  # noqa: E402
from bench.options import bench_parser, run_date  # noqa: E402
from bench.raw_client import Client  # noqa: E402
from logbus.protocol import codec  # noqa: E402
from logbus.testing import running_broker  # noqa: E402

DEADLINE_S = 300
PARTITIONS = 4
SHARE_COUNTS = (1, 4, 16)
CONSUMER_COUNTS = (1, 4)
BROKER_CONFIG = {"group.share.min.record.lock.duration.ms": "1000", "group.initial.rebalance.delay.ms": "0",
                 "group.share.min.heartbeat.interval.ms": "100", "group.share.heartbeat.interval.ms": "1000"}
HEARTBEAT, SHARE_FETCH, METADATA = 76, 78, 3

# One member process: reads the topic in a share group (or a consumer group) and prints how many
# records it has received, with the time of its first, whenever that changes.
MEMBER = r"""
import sys, time
from confluent_kafka import Consumer, ShareConsumer
bootstrap, group, topic, kind = sys.argv[1:5]
settings = {"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0}
if kind == "share":
    consumer = ShareConsumer(settings)
    poll = lambda: consumer.poll(0.2)
else:
    consumer = Consumer({**settings, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    poll = lambda: consumer.consume(1000, 0.2)
consumer.subscribe([topic])
received, first = 0, None
while True:
    batch = poll()
    if batch:
        first = first or time.time()
        received += sum(1 for m in batch if m.error() is None)
        print(received, first, flush=True)  # the parent reads the last complete line
"""


def spread(values: list[float], digits: int = 1) -> dict[str, float]:
    return {"min": round(min(values), digits), "median": round(statistics.median(values), digits),
            "max": round(max(values), digits)}


def set_group_configs(bootstrap: str, group: str, **configs: str) -> None:
    entries = [ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
               for name, value in configs.items()]
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    resource = ConfigResource(AdminResourceType.GROUP, group, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(30)


def new_topic(bootstrap: str, partitions: int) -> str:
    name = f"share-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


# ---------------------------------------------------------------- throughput


def read_all(bootstrap: str, pid: int, topic: str, records: int, members: int, kind: str) -> dict[str, float]:
    """`members` processes of a fresh group of `kind` ("share" or "consumer") read the topic's
    `records`: records/s from the first record received to the last, broker CPU per record."""
    group = f"{kind}-bench-{uuid.uuid4().hex[:8]}"
    if kind == "share":
        set_group_configs(bootstrap, group, share_auto_offset_reset="earliest")
    cpu_before = cpu_seconds(pid)
    processes = [subprocess.Popen([sys.executable, "-c", MEMBER, bootstrap, group, topic, kind],
                                  stdout=subprocess.PIPE) for _ in range(members)]
    try:
        counts, firsts = [0] * members, [float("inf")] * members
        pending = [""] * members
        deadline = time.monotonic() + DEADLINE_S
        while sum(counts) < records:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{kind} x{members}: {sum(counts)} of {records} records by the deadline")
            ready, _, _ = select.select([p.stdout for p in processes], [], [], 0.05)
            for index, process in enumerate(processes):
                if process.stdout in ready:
                    pending[index] += os.read(process.stdout.fileno(), 1 << 16).decode()
                    *lines, pending[index] = pending[index].split("\n")
                    if lines:
                        count, first = lines[-1].split()
                        counts[index], firsts[index] = int(count), float(first)
        done = time.time()
        cpu = cpu_seconds(pid) - cpu_before
    finally:
        for process in processes:
            process.kill()
            process.wait()
    return {"records_per_s": records / (done - min(firsts)), "broker_cpu_us_per_record": cpu / records * 1e6,
            "delivered": sum(counts)}


def throughput(bootstrap: str, pid: int, records: int, reps: int) -> dict[str, Any]:
    topic = new_topic(bootstrap, PARTITIONS)
    _produce_spread(bootstrap, topic, records)
    runs: dict[str, list[dict[str, float]]] = {}
    for rep in range(reps):
        for kind, counts in (("share", SHARE_COUNTS), ("consumer", CONSUMER_COUNTS)):
            for members in counts:
                run = read_all(bootstrap, pid, topic, records, members, kind)
                run["load_average_1m"] = os.getloadavg()[0]
                runs.setdefault(f"{kind}_x{members}", []).append(run)
                print(f"rep {rep + 1} {kind} x{members}: {run['records_per_s']:.0f} records/s, "
                      f"{run['broker_cpu_us_per_record']:.1f} µs broker CPU/record, load {run['load_average_1m']:.1f}",
                      flush=True)
    return {name: {"records_per_s": spread([r["records_per_s"] for r in found], 0),
                   "broker_cpu_us_per_record": spread([r["broker_cpu_us_per_record"] for r in found]),
                   "load_average_1m": spread([r["load_average_1m"] for r in found])}
            for name, found in runs.items()}


def _produce_spread(bootstrap: str, topic: str, records: int) -> None:
    """`records` values of 100 B, round robin over the partitions (no key: librdkafka's sticky
    partitioner spreads whole batches)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **QUIET})
    value = b"x" * 100
    for number in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=number % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(DEADLINE_S):
        raise RuntimeError("records left unacknowledged")


# ---------------------------------------------------------------- redelivery


class RawMember:
    """A share group member on its own connection: heartbeats and share fetches as raw requests."""

    def __init__(self, port: int, group: str, topic: str, topic_id: uuid.UUID) -> None:
        self.client = Client(port)
        self.group, self.topic_id = group, topic_id
        self.member_id = uuid.uuid4().hex
        self.epoch = 0
        joined = self.call(HEARTBEAT, 1, group_id=group, member_id=self.member_id, member_epoch=0,
                           subscribed_topic_names=(topic,))
        if joined.error_code:
            raise RuntimeError(f"share group heartbeat: {joined.error_code}")

    def call(self, api_key: int, version: int, **fields: Any) -> Any:
        request = codec.make(codec.request_class(api_key, version), **fields)
        answer = self.client.call(api_key, version, request)
        return entity_reader(codec.response_class(api_key, version))(answer, 5)[0]

    def fetch(self, wait_ms: int, accept: tuple[int, int] | None = None) -> Any:
        """One ShareFetch of partition 0 (opening the session first), acknowledging `accept`
        (first, last offset) on the way."""
        request_module = sys.modules[codec.request_class(SHARE_FETCH, 1).__module__]
        batches = () if accept is None else (request_module.AcknowledgementBatch(
            first_offset=accept[0], last_offset=accept[1], acknowledge_types=(1,)),)
        partition = request_module.FetchPartition(partition_index=0, acknowledgement_batches=batches)
        answer = self.call(SHARE_FETCH, 1, group_id=self.group, member_id=self.member_id,
                           share_session_epoch=self.epoch, max_wait=datetime.timedelta(milliseconds=wait_ms),
                           min_bytes=1, max_bytes=1 << 20, max_records=500, batch_size=500,
                           topics=(request_module.FetchTopic(topic_id=self.topic_id, partitions=(partition,)),),
                           forgotten_topics_data=())
        self.epoch += 1
        return answer

    def close(self) -> None:
        self.client.close()


def acquired(answer: Any) -> list[tuple[int, int, int]]:
    """(first offset, last offset, delivery count) of what a ShareFetch answer acquired."""
    return [(r.first_offset, r.last_offset, r.delivery_count) for t in answer.responses for p in t.partitions
            for r in p.acquired_records]


def redelivery(bootstrap: str, port: int, reps: int, lock_ms: int) -> dict[str, Any]:
    topic = new_topic(bootstrap, 1)
    group = f"share-redelivery-{uuid.uuid4().hex[:8]}"
    set_group_configs(bootstrap, group, share_auto_offset_reset="earliest",
                      share_record_lock_duration_ms=str(lock_ms))
    topic_id = _topic_id(port, topic)
    holder, waiter = RawMember(port, group, topic, topic_id), RawMember(port, group, topic, topic_id)
    try:
        holder.fetch(0)  # open both sessions (epoch 0 acquires nothing on an empty topic)
        waiter.fetch(0)
        seconds = []
        for rep in range(reps):
            produce({"bootstrap.servers": bootstrap, **QUIET}, topic, 1, b"r")
            held = _until(lambda: acquired(holder.fetch(500)), "the holder's acquisition")
            taken = time.perf_counter()
            again = _until(lambda: acquired(waiter.fetch(lock_ms * 3)), "the redelivery")
            seconds.append(time.perf_counter() - taken)
            if again[0][:2] != held[0][:2] or again[0][2] != 2:
                raise RuntimeError(f"redelivered {again}, held {held}")
            waiter.fetch(0, accept=again[0][:2])
            print(f"rep {rep + 1}: redelivered {seconds[-1] * 1000:.0f} ms after the acquisition "
                  f"(lock {lock_ms} ms), load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        holder.close()
        waiter.close()
    after_ms = [s * 1000 - lock_ms for s in seconds]
    return {"lock_ms": lock_ms, "acquired_to_redelivered_ms": spread([s * 1000 for s in seconds], 0),
            "after_lock_expiry_ms": spread(after_ms, 0), "load_average_1m": os.getloadavg()[0]}


def _until(attempt: Callable[[], list[Any]], what: str) -> list[Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = attempt()
        if found:
            return found
    raise RuntimeError(f"no {what} within 60 s")


def _topic_id(port: int, topic: str) -> uuid.UUID:
    client = Client(port)
    try:
        request = codec.make(codec.request_class(METADATA, 12), topics=None, allow_auto_topic_creation=False,
                             include_topic_authorized_operations=False)
        answer = entity_reader(codec.response_class(METADATA, 12))(client.call(METADATA, 12, request), 5)[0]
        return next(t.topic_id for t in answer.topics if t.name == topic)
    finally:
        client.close()


def main() -> int:
    parser = bench_parser(__doc__, "share_bench.json")
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--lock-ms", type=int, default=1000)
    parser.add_argument("--only", choices=("throughput", "redelivery"))
    args = parser.parse_args()
    results: dict[str, Any] = {"date": run_date(), "records": args.records, "partitions": PARTITIONS,
                               "reps": args.reps, "uptime_before": _uptime()}
    with running_broker(config=BROKER_CONFIG) as broker:
        pid = broker.process.pid
        if args.only != "redelivery":
            results["throughput"] = throughput(broker.bootstrap, pid, args.records, args.reps)
        if args.only != "throughput":
            results["redelivery"] = redelivery(broker.bootstrap, broker.port, args.reps, args.lock_ms)
    results["uptime_after"] = _uptime()
    print(json.dumps(results, indent=1))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=1)
    return 0


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
