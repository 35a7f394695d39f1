"""Control-plane costs of a logbus ZooKeeper cluster at a given partition count (issue 25).

    .venv/bin/python bench/scale_bench.py --partitions 10000 --brokers 3 --reps 3 [--topics N]
        [--rolling-restart | --only-create] [--out bench/results/scale_bench.json]

One real ZooKeeper and `--brokers` brokers on loopback (zookeeper.session.timeout.ms 6000, RF 3,
min.insync.replicas 2), a fresh cluster per repetition. Every other broker setting is the broker's
default, as a Kafka user meets it: replica.lag.time.max.ms is Kafka's 30000, not the test
clusters' 3000 (`--set replica.lag.time.max.ms=3000` measures that). Each repetition measures, in order:

1. create: CreateTopics of `--topics` topics holding `--partitions` partitions in all, until
   every live broker's Metadata shows every partition with a leader and a full ISR;
2. Metadata for all topics: a raw Metadata v12 request from one connection, `--samples` times
   (the time until the whole answer is read, not decoded);
3. SIGTERM of the (non-controller) broker leading the most partitions, while an acks=all
   idempotent producer writes round-robin to every partition (`--rate` records/s, from
   `--steady-s` before the signal until 2 s after the exit): time until the process exits, partitions still
   led by it at that moment (Metadata of another broker right after), time until every partition
   is led by a live broker, the producer's failed sends (`--message-timeout-ms`), and how long
   records waited for their answer, sent before the signal (the steady state) and after;
4. restart of that broker: time until it listens, until its logs are loaded (it serves its
   partitions), until it is back in every ISR;
5. SIGKILL of the controller (Metadata's controller_id): time until another broker is
   controller, time until every partition is led by a live broker; then its restart as in 4
   (a killed broker recovers its logs);
6. every broker's RSS and open file descriptors before and after the create, and per replica;
   before step 1, the time until every broker's Metadata lists all of them (registration), and
   before and after the create, `--idle-s` of each idle broker's CPU and RSS.

The sources are byte-compiled first: with PYTHONDONTWRITEBYTECODE set, every broker start would
compile them again (seconds of wall time per start with dozens of brokers on a loaded machine).

`--rolling-restart` instead SIGTERMs each broker in turn (restart, wait until every ISR is full,
next) under the acks=all producer (its failed sends counted per step), then consumes every
partition back and counts acknowledged records that are missing, then SIGKILLs the controller
as in 5.

Every figure is reported as min/median/max over the repetitions; a target (the issue's, set for
10,000 partitions) counts as met when the worst repetition meets it. Every wait has a deadline
(`--deadline`, by default 120 s plus 30 ms per partition). Loopback only.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kio.schema.metadata.v12 import request as metadata_v12  # noqa: E402
from kio.schema.metadata.v12 import response as metadata_response  # noqa: E402
from kio.serial import entity_reader  # noqa: E402

import logbus.testing  # noqa: E402
from bench.broker_bench import cpu_seconds, rss_mib  # noqa: E402
from bench.one_broker import write_results  # noqa: E402
from bench.raw_client import Client  # noqa: E402
from logbus.broker.topics import MAX_PARTITIONS_PER_REQUEST  # noqa: E402
from logbus.testing import BrokerProcess, Cluster, running_cluster, running_zookeeper  # noqa: E402

QUIET = {"log_level": 0}
METADATA_KEY, METADATA_VERSION = 3, 12
ALL_TOPICS = metadata_v12.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False)
# brokers and controller only: waiting for a new controller with answers of every partition from
# dozens of brokers kept the machine busy decoding them while the brokers elected it
NO_TOPICS = metadata_v12.MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                         include_topic_authorized_operations=False)
READ_METADATA = entity_reader(metadata_response.MetadataResponse)
SESSION_TIMEOUT_MS = 6000
MAX_SOCKET_TIMEOUT_MS = 300_000  # librdkafka's bound on socket.timeout.ms
POLL_S = 0.1
WARM_WAVE = 100  # partitions warmed at once (a few per broker)
CREATE_REQUEST_PARTITIONS = MAX_PARTITIONS_PER_REQUEST // 2
BROKER_REPLICA_LAG_MS = "30000"  # the broker's (and Kafka's) default; running_cluster sets 3000 for tests
AFTER_EXIT_S = 2.0  # the producer writes on this long after the stopped broker is gone


@dataclass(frozen=True)
class PartitionView:
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class ClusterView:
    """One broker's Metadata answer for all topics."""

    controller_id: int
    partitions: dict[tuple[str, int], PartitionView]

    def led_by(self, broker_id: int) -> int:
        return sum(1 for p in self.partitions.values() if p.leader == broker_id)


def read_view(client: Client, request: Any = ALL_TOPICS) -> ClusterView:
    answer = client.call(METADATA_KEY, METADATA_VERSION, request)
    decoded, _size = READ_METADATA(answer, 5)  # after the correlation id and the header's tags
    partitions = {(t.name, p.partition_index): PartitionView(p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes))
                  for t in decoded.topics for p in t.partitions}
    return ClusterView(decoded.controller_id, partitions)


class Deadline:
    """A point in monotonic time that every wait of one step checks."""

    def __init__(self, seconds: float, what: str) -> None:
        self.at = time.monotonic() + seconds
        self.what = what

    def left(self) -> float:
        return max(0.0, self.at - time.monotonic())


def live(cluster: Cluster) -> list[BrokerProcess]:
    return [b for b in cluster.brokers.values() if b.running]


def view_of(broker: BrokerProcess) -> ClusterView:
    client = Client(broker.port, timeout=60)
    try:
        return read_view(client)
    finally:
        client.close()


Pending = Callable[[ClusterView], int]  # how many partitions (or controllers) are not yet as wanted


def wait_on(broker: BrokerProcess, pending: Pending, deadline: Deadline, what: str,
            request: Any = ALL_TOPICS) -> ClusterView:
    """Poll `broker`'s Metadata (`request`) until nothing is `pending` on it (reconnecting if it
    drops us), pausing between two requests at least as long as the last answer took (an answer
    of tens of thousands of partitions costs the broker that much CPU)."""
    client: Client | None = None
    left: int | str = "unknown (no answer)"
    pause = POLL_S
    try:
        while time.monotonic() < deadline.at:
            try:
                client = client or Client(broker.port, timeout=max(deadline.left(), 1))
                asked = time.monotonic()
                view = read_view(client, request)
                pause = max(POLL_S, time.monotonic() - asked)
                left = pending(view)
                if not left:
                    return view
            except (OSError, ConnectionError):
                if client is not None:
                    client.close()
                client = None
            time.sleep(pause)
    finally:
        if client is not None:
            client.close()
    raise TimeoutError(f"{deadline.what}: {what}: {left} still pending on broker {broker.broker_id}")


def wait_everywhere(cluster: Cluster, pending: Pending, deadline: Deadline, began: float, what: str,
                    request: Any = ALL_TOPICS) -> float:
    """Seconds from `began` until nothing is `pending` in any live broker's Metadata (every
    broker asked at once, each on a thread of its own: one after the other, dozens of brokers
    each answering Metadata of thousands of partitions on a loaded machine measured the bench)."""
    brokers = live(cluster)
    with ThreadPoolExecutor(max_workers=len(brokers)) as pool:
        for waited in [pool.submit(wait_on, broker, pending, deadline, what, request) for broker in brokers]:
            waited.result()
    return time.monotonic() - began


def not_ready(expected: int) -> Pending:
    """Of `expected` partitions, those without a leader or a full ISR."""
    def count(view: ClusterView) -> int:
        return max(0, expected - len(view.partitions)) + sum(
            1 for p in view.partitions.values() if p.leader < 0 or set(p.isr) != set(p.replicas))
    return count


def not_led_by(alive: set[int]) -> Pending:
    def count(view: ClusterView) -> int:
        return sum(1 for p in view.partitions.values() if p.leader not in alive)
    return count


def not_in_isr(broker_id: int) -> Pending:
    def count(view: ClusterView) -> int:
        return sum(1 for p in view.partitions.values() if broker_id in p.replicas and broker_id not in p.isr)
    return count


def topic_sizes(partitions: int, topics: int) -> dict[str, int]:
    """`partitions` spread over `topics` topics named scale-0000...; the first ones get the rest."""
    share, rest = divmod(partitions, topics)
    return {f"scale-{i:04d}": share + (1 if i < rest else 0) for i in range(topics) if share or i < rest}


def request_batches(sizes: dict[str, int]) -> list[dict[str, int]]:
    """`sizes` cut into CreateTopics requests of at most CREATE_REQUEST_PARTITIONS partitions each:
    a broker refuses more than MAX_PARTITIONS_PER_REQUEST in one request, as Kafka's controller
    does, and one of 10,000 was not answered within librdkafka's 300 s socket timeout at load 30-60."""
    batches: list[dict[str, int]] = [{}]
    for name, count in sizes.items():
        if batches[-1] and sum(batches[-1].values()) + count > CREATE_REQUEST_PARTITIONS:
            batches.append({})
        batches[-1][name] = count
    return batches


def create_topics(cluster: Cluster, sizes: dict[str, int], replication: int, deadline: Deadline) -> float:
    """Seconds from CreateTopics until every live broker sees every partition led with a full ISR."""
    wait_ms = min(MAX_SOCKET_TIMEOUT_MS, int(deadline.left() * 1000))  # librdkafka's 60 s would cut CreateTopics
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": wait_ms, **QUIET})
    began = time.monotonic()
    for batch in request_batches(sizes):  # one after the other: a request's wait starts when it is sent
        futures = admin.create_topics([NewTopic(name, count, replication) for name, count in batch.items()],
                                      request_timeout=min(deadline.left(), 3600))  # librdkafka: at most 1 h
        for future in futures.values():
            future.result(deadline.left())
    return wait_everywhere(cluster, not_ready(sum(sizes.values())), deadline, began, "partitions not ready")


def metadata_latency(broker: BrokerProcess, samples: int) -> dict[str, float]:
    """Milliseconds until a whole raw answer to Metadata for all topics is read, one connection
    asking `samples` times in a row (min/median/max), and the answer's size."""
    client = Client(broker.port, timeout=60)
    try:
        size = len(client.call(METADATA_KEY, METADATA_VERSION, ALL_TOPICS))  # the connection's first answer
        timings = []
        for _ in range(samples):
            began = time.perf_counter()
            client.call(METADATA_KEY, METADATA_VERSION, ALL_TOPICS)
            timings.append((time.perf_counter() - began) * 1000)
    finally:
        client.close()
    return {"min": round(min(timings), 2), "median": round(statistics.median(timings), 2),
            "max": round(max(timings), 2), "answer_bytes": size}


def process_figures(pid: int) -> dict[str, float]:
    """RSS (MiB), open file descriptors and CPU seconds used so far (user + system) of one process."""
    return {"rss_mib": round(rss_mib(pid), 1), "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "cpu_s": round(cpu_seconds(pid), 2)}


def resources(cluster: Cluster) -> dict[int, dict[str, float]]:
    return {broker_id: process_figures(b.process.pid) for broker_id, b in cluster.brokers.items() if b.running}


def per_replica(before: dict[int, dict[str, float]], after: dict[int, dict[str, float]],
                view: ClusterView) -> dict[str, float]:
    """What the create added to the brokers (RSS in KiB, fds, CPU milliseconds: the create's cost
    that does not depend on the machine's load) per replica they host, over all brokers."""
    replicas = sum(len(p.replicas) for p in view.partitions.values())
    rss = sum(after[b]["rss_mib"] - before[b]["rss_mib"] for b in after) * 1024
    fds = sum(after[b]["fds"] - before[b]["fds"] for b in after)
    cpu = sum(after[b]["cpu_s"] - before[b]["cpu_s"] for b in after) * 1000
    return {"rss_kib_per_replica": round(rss / replicas, 2), "fds_per_replica": round(fds / replicas, 3),
            "create_cpu_ms_per_replica": round(cpu / replicas, 3)}


def spread(values: list[float]) -> dict[str, float]:
    return {"min": round(min(values), 2), "median": round(statistics.median(values), 2), "max": round(max(values), 2)}


def idle_cost(cluster: Cluster, seconds: float) -> dict[str, Any]:
    """What the brokers cost while nothing is asked of them: each one's CPU (percent of one core,
    user + system) over `seconds`, their sum, and each one's RSS; the load average beside."""
    pids = {broker_id: b.process.pid for broker_id, b in cluster.brokers.items() if b.running and b.process}
    before = {broker_id: cpu_seconds(pid) for broker_id, pid in pids.items()}
    began = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - began
    percent = [100 * (cpu_seconds(pid) - before[broker_id]) / elapsed for broker_id, pid in pids.items()]
    return {"seconds": round(elapsed, 1), "cpu_percent": spread(percent), "cpu_percent_all": round(sum(percent), 1),
            "rss_mib": spread([rss_mib(pid) for pid in pids.values()]), "load_average": os.getloadavg()[0]}


@dataclass(frozen=True)
class Failure:
    error: str
    partition: tuple[str, int]
    sent_at: float


@dataclass
class Load:
    """An acks=all idempotent producer writing round-robin to `partitions` at about `rate`
    records/s in its own thread, counting what is acknowledged and what fails."""

    bootstrap: str
    partitions: list[tuple[str, int]]
    rate: int
    max_records: int
    message_timeout_ms: int = 30000
    sent: int = 0
    acked: dict[tuple[str, int], set[bytes]] = field(default_factory=dict)
    failed: list[Failure] = field(default_factory=list)
    answered: list[tuple[float, float]] = field(default_factory=list)  # (sent at, seconds until answered)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": self.message_timeout_ms, **QUIET})

    def warm(self, deadline: Deadline) -> None:
        """One record into every partition, acknowledged, before anything is timed; `WARM_WAVE`
        partitions at a time: librdkafka's idempotent producer has one ProduceRequest of one
        partition in flight per broker, so a broker leading hundreds of partitions answers them
        one acks=all round trip after the other, past `message.timeout.ms` on a loaded machine."""
        for first in range(0, len(self.partitions), WARM_WAVE):
            for topic, partition in self.partitions[first:first + WARM_WAVE]:
                self._send(topic, partition)
            self._flush(deadline)
        if self.failed:
            raise RuntimeError(f"warm-up sends failed: {[f.error for f in self.failed[:3]]}")
        self.answered.clear()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self, deadline: Deadline) -> dict[str, Any]:
        """Stop writing, wait for every outstanding answer; the counts."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(deadline.left())
        self._flush(deadline)
        return {"sent": self.sent, "acked": sum(len(v) for v in self.acked.values()), "failed": len(self.failed),
                "failures": sorted({f.error for f in self.failed})[:5],
                "slowest_answer_s": round(max((s for _, s in self.answered), default=0.0), 3)}

    def around(self, signalled_at: float, its_partitions: set[tuple[str, int]]) -> dict[str, Any]:
        """Seconds until records were answered, median and slowest, for those sent before the
        signal (the steady state) and after it; where the failed sends were: in how many
        partitions, how many in partitions the stopped broker led, when they were sent (seconds
        after the signal, first and last)."""
        result: dict[str, Any] = {}
        for name, answers in (("before", [s for at, s in self.answered if at < signalled_at]),
                              ("after", [s for at, s in self.answered if at >= signalled_at])):
            if answers:
                result[f"answer_s_sent_{name}_signal"] = [round(statistics.median(answers), 3), round(max(answers), 3)]
        if self.failed:
            sent = [f.sent_at - signalled_at for f in self.failed]
            result.update(failed_partitions=len({f.partition for f in self.failed}),
                          failed_in_its_partitions=sum(1 for f in self.failed if f.partition in its_partitions),
                          failed_sent_after_signal_s=[round(min(sent), 3), round(max(sent), 3)])
        return result

    def _run(self) -> None:
        began, written = time.monotonic(), 0
        while not self._stop.is_set() and written < self.max_records:
            due = min(self.max_records, int(self.rate * (time.monotonic() - began)) + 1)
            while written < due:
                self._send(*self.partitions[written % len(self.partitions)])
                written += 1
            self.producer.poll(0.01)

    def _send(self, topic: str, partition: int) -> None:
        value = str(self.sent).encode()
        self.sent += 1
        sent_at = time.monotonic()

        def done(error: KafkaError | None, _message: object) -> None:
            self.answered.append((sent_at, time.monotonic() - sent_at))
            if error is not None:
                self.failed.append(Failure(error.name(), (topic, partition), sent_at))
            else:
                self.acked.setdefault((topic, partition), set()).add(value)

        for _ in range(1000):  # a full local queue drains as answers come
            try:
                self.producer.produce(topic, value, partition=partition, on_delivery=done)
                return
            except BufferError:
                self.producer.poll(0.05)
        self.failed.append(Failure("local queue full", (topic, partition), sent_at))

    def _flush(self, deadline: Deadline) -> None:
        if self.producer.flush(deadline.left()) > 0:
            raise TimeoutError("producer records still unanswered at the deadline")


def lost_records(bootstrap: str, acked: dict[tuple[str, int], set[bytes]], deadline: Deadline) -> int:
    """Acknowledged values not found when every partition is read back from the start."""
    missing = {tp: set(values) for tp, values in acked.items() if values}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "scale-bench-verify",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", **QUIET})
    consumer.assign([TopicPartition(topic, partition, 0) for topic, partition in missing])
    try:
        while missing and time.monotonic() < deadline.at:
            for message in consumer.consume(1000, 0.5):
                if message.error() is None:
                    key = (message.topic(), message.partition())
                    if key in missing:
                        missing[key].discard(message.value())
                        if not missing[key]:
                            del missing[key]
    finally:
        consumer.close()
    return sum(len(values) for values in missing.values())


def stop_gracefully(broker: BrokerProcess, deadline: Deadline, out: dict[str, Any] | None = None) -> float:
    """SIGTERM `broker`; seconds until its process exits (SIGKILL at the deadline). With `out`, also
    the CPU seconds the process used from the signal to its exit, its exit code and what its stop
    line says (each phase's seconds; how long the process took to exit after writing it)."""
    process = broker.process
    assert process is not None
    cpu_before = cpu_seconds(process.pid)
    began = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        status, usage = reap(process, deadline)
    except Exception:
        broker.kill()
        raise
    exited_s, exited_at = time.monotonic() - began, time.time()
    broker.process = None
    if out is not None:
        out["stop_cpu_s"] = round(usage.ru_utime + usage.ru_stime - cpu_before, 3)
        out["exit_code"] = os.waitstatus_to_exitcode(status)
        out.update(stop_line(broker.log_path, exited_at))
    return exited_s


def reap(process: subprocess.Popen, deadline: Deadline) -> tuple[int, resource.struct_rusage]:
    """Wait for `process` to exit (TimeoutError at the deadline): its wait status and the CPU it
    used in all (wait4's, which Popen.wait does not give)."""
    while time.monotonic() < deadline.at:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            return status, usage
        time.sleep(0.005)
    raise TimeoutError(f"broker process {process.pid} still running at the deadline")


STOP_LINE = re.compile(r"^(\S+ \S+) INFO \S+: broker \d+ stopped cleanly in [\d.]+ s \((.*)\)$")


def stop_line(log_path: str, exited_at: float) -> dict[str, Any]:
    """The last `stopped cleanly` line of the broker's log: each phase's seconds, and the seconds
    from that line to the process's exit (the interpreter's teardown)."""
    with open(log_path, encoding="utf-8", errors="replace") as handle:
        found = [m for m in map(STOP_LINE.match, handle.read().splitlines()) if m]
    if not found:
        return {}
    logged, phases = found[-1].groups()
    logged_at = time.mktime(time.strptime(logged.split(",")[0], "%Y-%m-%d %H:%M:%S")) + int(logged[-3:]) / 1000
    seconds = {name: float(value) for name, value in
               (re.match(r"(.*) ([\d.]+) s$", part).groups() for part in phases.split(", "))}  # type: ignore[union-attr]
    return {"stop_phases_s": seconds, "after_stop_line_s": round(exited_at - logged_at, 3)}


def restart(cluster: Cluster, broker: BrokerProcess, deadline: Deadline, out: dict[str, Any]) -> None:
    """Start `broker` again: seconds until it listens, until its logs are loaded, and until it is
    back in every ISR."""
    began = time.monotonic()
    broker.start()
    out["listening_s"] = round(broker.listening_in_s, 3)
    out["loaded_s"] = round(time.monotonic() - began, 3)
    out["in_every_isr_s"] = round(wait_everywhere(cluster, not_in_isr(broker.broker_id), deadline, began,
                                                  f"partitions without broker {broker.broker_id} in their ISR"), 3)


def graceful_stop(cluster: Cluster, broker: BrokerProcess, deadline: Deadline, out: dict[str, Any]) -> None:
    """SIGTERM `broker`: exit time, leaderships it still held when it was gone (as another broker
    saw them right after), time until every partition had a live leader."""
    out["broker"] = broker.broker_id
    began = time.monotonic()
    out["exit_s"] = round(stop_gracefully(broker, deadline, out), 3)
    others = live(cluster)
    out["led_at_exit"] = view_of(others[0]).led_by(broker.broker_id)
    out["all_led_s"] = round(wait_everywhere(cluster, not_led_by({b.broker_id for b in others}), deadline, began,
                                             "partitions without a live leader"), 3)


def sigterm_step(cluster: Cluster, view: ClusterView, args: argparse.Namespace, deadline: Deadline,
                 out: dict[str, Any]) -> None:
    """Steps 3 and 4: SIGTERM the non-controller broker leading the most, under load; restart it."""
    candidates = [b for b in cluster.brokers if b != view.controller_id] or list(cluster.brokers)
    target = cluster.brokers[max(candidates, key=view.led_by)]
    out["led_before"] = view.led_by(target.broker_id)
    load = Load(cluster.bootstrap, sorted(view.partitions), args.rate, args.max_records, args.message_timeout_ms)
    load.warm(deadline)
    load.start()
    time.sleep(args.steady_s)  # the steady state the answers during the shutdown compare with
    signalled_at = time.monotonic()
    try:
        graceful_stop(cluster, target, deadline, out)
        time.sleep(max(0.0, AFTER_EXIT_S - out["all_led_s"] + out["exit_s"]))  # writing on after the exit
    finally:
        out["producer"] = load.stop(deadline)
        its_partitions = {key for key, p in view.partitions.items() if p.leader == target.broker_id}
        out["producer"].update(load.around(signalled_at, its_partitions))
    restart(cluster, target, Deadline(args.deadline, "restart after SIGTERM"), out.setdefault("restart", {}))


def controller_kill_step(cluster: Cluster, seconds: float, out: dict[str, Any]) -> None:
    """Step 5: SIGKILL the controller; a new one, every partition led by a live broker; restart."""
    some = live(cluster)[0]
    controller_id = view_of(some).controller_id
    if controller_id not in cluster.brokers:
        raise RuntimeError(f"no controller known to broker {some.broker_id}: {controller_id}")
    out["broker"] = controller_id
    killed = cluster.brokers[controller_id]
    deadline = Deadline(seconds, "controller SIGKILL")
    began = time.monotonic()
    killed.kill()
    alive = {b.broker_id for b in live(cluster)}
    out["new_controller_s"] = round(wait_everywhere(cluster, lambda v: int(v.controller_id not in alive), deadline,
                                                    began, "controllers gone", NO_TOPICS), 3)
    out["all_led_s"] = round(wait_everywhere(cluster, not_led_by(alive), deadline, began,
                                             "partitions without a live leader"), 3)
    restart(cluster, killed, Deadline(seconds, "restart after SIGKILL"), out.setdefault("restart", {}))


@contextmanager
def created_cluster(args: argparse.Namespace, deadline: Deadline, out: dict[str, Any]) -> Iterator[Cluster]:
    """A fresh cluster with the topics created: the create's time and the brokers' resources.
    When a step times out, the brokers' logs are kept (their directory is in `out["logs"]`)."""
    replication = min(3, args.brokers)
    config = {"zookeeper.session.timeout.ms": str(args.session_timeout_ms),
              "min.insync.replicas": str(min(2, replication)), "replica.lag.time.max.ms": BROKER_REPLICA_LAG_MS,
              **dict(item.split("=", 1) for item in args.set)}
    with running_zookeeper() as zookeeper:
        began = time.monotonic()
        with running_cluster(args.brokers, config, zookeeper) as cluster:
            out["registration_s"] = round(time.monotonic() - began, 3)  # until every broker lists all of them
            yield from _with_topics(cluster, args, replication, deadline, out)


def _with_topics(cluster: Cluster, args: argparse.Namespace, replication: int, deadline: Deadline,
                 out: dict[str, Any]) -> Iterator[Cluster]:
    """The topics created in `cluster`; the idle cost (`--idle-s`) measured before and after."""
    try:
        if args.idle_s:
            out["idle_empty"] = idle_cost(cluster, args.idle_s)
        before = resources(cluster)
        sizes = topic_sizes(args.partitions, args.topics or max(1, args.partitions // 100))
        out.update(topics=len(sizes), partitions=sum(sizes.values()))
        out["create_s"] = round(create_topics(cluster, sizes, replication, deadline), 3)
        after = resources(cluster)
        out.update(resources_before=before, resources_after=after,
                   **per_replica(before, after, view_of(live(cluster)[0])))
        if args.idle_s:
            out["idle"] = idle_cost(cluster, args.idle_s)
        yield cluster
    except (TimeoutError, RuntimeError, KafkaException):
        out["logs"] = keep_logs(cluster)
        raise


def keep_logs(cluster: Cluster) -> str:
    """Copy the brokers' logs out of the cluster's directory, which goes with the cluster."""
    kept = tempfile.mkdtemp(prefix="scale-bench-logs-")
    for broker_id, broker in cluster.brokers.items():
        shutil.copy(broker.log_path, os.path.join(kept, f"broker-{broker_id}.log"))
    return kept


def progress(step: str, result: dict[str, Any]) -> None:
    """The figures so far, printed as soon as `step` is measured: at 100,000 partitions a step
    takes many minutes, and removing the cluster's files at the end minutes more."""
    print(f"after {step} ({time.strftime('%H:%M:%S')}, load average {os.getloadavg()[0]:.1f}): "
          f"{json.dumps(result)}", flush=True)


def measure_rep(args: argparse.Namespace) -> dict[str, Any]:
    """One repetition of steps 1-6 on a fresh cluster; a step that fails ends it (`failed`)."""
    result: dict[str, Any] = {}
    try:
        with created_cluster(args, Deadline(args.deadline, "create"), result) as cluster:
            progress("created", result)
            if args.only_create:
                return result
            first = live(cluster)[0]
            result["metadata_ms"] = metadata_latency(first, args.samples)
            progress("Metadata", result)
            sigterm_step(cluster, view_of(first), args, Deadline(args.deadline, "SIGTERM step"),
                         result.setdefault("sigterm", {}))
            if args.keep_logs:
                result["logs"] = keep_logs(cluster)
            if not args.no_controller_kill:
                controller_kill_step(cluster, args.deadline, result.setdefault("controller_kill", {}))
    except (TimeoutError, RuntimeError, KafkaException) as exc:  # RuntimeError: a broker that did not start
        result["failed"] = str(exc)
    return result


def rolling_rep(args: argparse.Namespace) -> dict[str, Any]:
    """SIGTERM each broker in turn under an acks=all producer; every acknowledged record read back."""
    result: dict[str, Any] = {"rolling": []}
    deadline = Deadline(args.deadline * (args.brokers + 2), "a rolling restart")
    try:
        with created_cluster(args, deadline, result) as cluster:
            view = view_of(live(cluster)[0])
            load = Load(cluster.bootstrap, sorted(view.partitions), args.rate, args.max_records,
                        args.message_timeout_ms)
            load.warm(deadline)
            load.start()
            began = time.monotonic()
            try:
                for broker in list(cluster.brokers.values()):
                    step = Deadline(args.deadline, f"rolling restart of broker {broker.broker_id}")
                    result["rolling"].append(done := {"began": time.monotonic()})
                    graceful_stop(cluster, broker, step, done)
                    restart(cluster, broker, Deadline(args.deadline, f"restart of broker {broker.broker_id}"),
                            done.setdefault("restart", {}))
            finally:
                result["rolling_s"] = round(time.monotonic() - began, 3)
                result["producer"] = load.stop(deadline)
                failed_per_step(load, result["rolling"])
            result["producer"]["lost"] = lost_records(cluster.bootstrap, load.acked, deadline)
            controller_kill_step(cluster, args.deadline, result.setdefault("controller_kill", {}))
    except (TimeoutError, RuntimeError, KafkaException) as exc:  # RuntimeError: a broker that did not start
        result["failed"] = str(exc)
    return result


def failed_per_step(load: Load, steps: list[dict[str, Any]]) -> None:
    """Each rolling step's failed sends (those sent from its SIGTERM until the next one's), in
    place of the step's start time."""
    starts = [step.pop("began") for step in steps]
    for step, start, end in zip(steps, starts, [*starts[1:], float("inf")], strict=True):
        step["failed_sends"] = sum(1 for failure in load.failed if start <= failure.sent_at < end)


CLUSTER_FIGURES: dict[str, Callable[[dict[str, Any]], float]] = {
    "registration_s": lambda r: r["registration_s"],
    "idle_empty_cpu_percent_median": lambda r: r["idle_empty"]["cpu_percent"]["median"],
    "idle_empty_cpu_percent_all": lambda r: r["idle_empty"]["cpu_percent_all"],
    "idle_cpu_percent_median": lambda r: r["idle"]["cpu_percent"]["median"],
    "idle_cpu_percent_max": lambda r: r["idle"]["cpu_percent"]["max"],
    "idle_cpu_percent_all": lambda r: r["idle"]["cpu_percent_all"],
    "idle_rss_mib_median": lambda r: r["idle"]["rss_mib"]["median"],
    "idle_rss_mib_max": lambda r: r["idle"]["rss_mib"]["max"],
}
FIGURES: dict[str, Callable[[dict[str, Any]], float]] = {
    **CLUSTER_FIGURES,
    "create_s": lambda r: r["create_s"],
    "metadata_median_ms": lambda r: r["metadata_ms"]["median"],
    "metadata_max_ms": lambda r: r["metadata_ms"]["max"],
    "rss_kib_per_replica": lambda r: r["rss_kib_per_replica"],
    "fds_per_replica": lambda r: r["fds_per_replica"],
    "create_cpu_ms_per_replica": lambda r: r["create_cpu_ms_per_replica"],
    "sigterm_exit_s": lambda r: r["sigterm"]["exit_s"],
    "sigterm_led_at_exit": lambda r: r["sigterm"]["led_at_exit"],
    "sigterm_all_led_s": lambda r: r["sigterm"]["all_led_s"],
    "sigterm_stop_cpu_s": lambda r: r["sigterm"]["stop_cpu_s"],
    "sigterm_controlled_shutdown_s": lambda r: r["sigterm"]["stop_phases_s"]["controlled shutdown"],
    "sigterm_logs_s": lambda r: r["sigterm"]["stop_phases_s"]["logs"],
    "sigterm_after_stop_line_s": lambda r: r["sigterm"]["after_stop_line_s"],
    "sigterm_failed_sends": lambda r: r["sigterm"]["producer"]["failed"],
    "steady_answer_median_s": lambda r: r["sigterm"]["producer"]["answer_s_sent_before_signal"][0],
    "steady_answer_max_s": lambda r: r["sigterm"]["producer"]["answer_s_sent_before_signal"][1],
    "sigterm_slowest_answer_s": lambda r: r["sigterm"]["producer"]["slowest_answer_s"],
    "sigterm_restart_listening_s": lambda r: r["sigterm"]["restart"]["listening_s"],
    "sigterm_restart_loaded_s": lambda r: r["sigterm"]["restart"]["loaded_s"],
    "sigterm_restart_isr_s": lambda r: r["sigterm"]["restart"]["in_every_isr_s"],
    "kill_new_controller_s": lambda r: r["controller_kill"]["new_controller_s"],
    "kill_all_led_s": lambda r: r["controller_kill"]["all_led_s"],
    "kill_restart_listening_s": lambda r: r["controller_kill"]["restart"]["listening_s"],
    "kill_restart_loaded_s": lambda r: r["controller_kill"]["restart"]["loaded_s"],
    "kill_restart_isr_s": lambda r: r["controller_kill"]["restart"]["in_every_isr_s"],
}
ROLLING_FIGURES: dict[str, Callable[[dict[str, Any]], float]] = {
    **CLUSTER_FIGURES,
    "create_s": lambda r: r["create_s"],
    "exit_s_worst": lambda r: max(s["exit_s"] for s in r["rolling"]),
    "led_at_exit_total": lambda r: sum(s["led_at_exit"] for s in r["rolling"]),
    "restart_isr_s_worst": lambda r: max(s["restart"]["in_every_isr_s"] for s in r["rolling"]),
    "failed_sends": lambda r: r["producer"]["failed"],
    "lost_records": lambda r: r["producer"]["lost"],
    "slowest_answer_s": lambda r: r["producer"]["slowest_answer_s"],
    "rolling_total_s": lambda r: r["rolling_s"],
    "kill_new_controller_s": lambda r: r["controller_kill"]["new_controller_s"],
    "kill_all_led_s": lambda r: r["controller_kill"]["all_led_s"],
}


def targets(session_timeout_ms: int) -> dict[str, tuple[str, float]]:
    """The issue's targets (for 10,000 partitions): figure -> (how it reads, bound on the worst rep)."""
    return {"create_s": ("create <= 15 s", 15), "sigterm_led_at_exit": ("SIGTERM: 0 leaderships left at exit", 0),
            "sigterm_exit_s": ("SIGTERM: exit <= 5 s", 5),
            "sigterm_failed_sends": ("SIGTERM: 0 failed acks=all sends", 0),
            "kill_all_led_s": (f"controller SIGKILL: all led <= {session_timeout_ms / 1000 + 2:g} s",
                               session_timeout_ms / 1000 + 2),
            "sigterm_restart_listening_s": ("restart after SIGTERM: listening <= 3 s", 3),
            "sigterm_restart_isr_s": ("restart after SIGTERM: in every ISR <= 20 s", 20),
            "kill_restart_listening_s": ("restart after SIGKILL: listening <= 3 s", 3),
            "kill_restart_isr_s": ("restart after SIGKILL: in every ISR <= 20 s", 20),
            "metadata_median_ms": ("Metadata for all topics <= 100 ms (median)", 100),
            "led_at_exit_total": ("rolling: 0 leaderships left at any exit", 0),
            "exit_s_worst": ("rolling: every exit <= 5 s", 5),
            "restart_isr_s_worst": ("rolling: in every ISR <= 20 s", 20),
            "failed_sends": ("rolling: 0 failed acks=all sends", 0), "lost_records": ("rolling: 0 records lost", 0)}


def summarize(reps: list[dict[str, Any]], figures: dict[str, Callable[[dict[str, Any]], float]],
              session_timeout_ms: int) -> dict[str, dict[str, Any]]:
    """min/median/max of every figure over the repetitions that got that far, with its target,
    met when every repetition measured it and the worst one met it."""
    bounds = targets(session_timeout_ms)
    summary = {}
    for name, figure in figures.items():
        values = [value for value in (_figure(figure, rep) for rep in reps) if value is not None]
        row: dict[str, Any] = {"measured_in": len(values)}
        if values:
            row.update(min=min(values), median=statistics.median(values), max=max(values))
        if name in bounds:
            row["target"], bound = bounds[name]
            row["met"] = len(values) == len(reps) and max(values) <= bound
        summary[name] = row
    return summary


def _figure(figure: Callable[[dict[str, Any]], float], rep: dict[str, Any]) -> float | None:
    """One repetition's figure; None when a step before it failed."""
    try:
        return figure(rep)
    except (KeyError, ValueError):  # ValueError: max() of no rolling rounds
        return None


def print_table(summary: dict[str, dict[str, Any]]) -> None:
    print(f"{'figure':<30}{'min':>11}{'median':>11}{'max':>11}  target")
    for name, row in summary.items():
        verdict = f"  {row['target']}: {'met' if row['met'] else 'MISSED'}" if "target" in row else ""
        spread = "".join(f"{row[key]:>11,.3f}" if key in row else f"{'-':>11}" for key in ("min", "median", "max"))
        print(f"{name:<30}{spread}{verdict}")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--topics", type=int, default=0, help="topics to spread the partitions over "
                        "(default: one per 100 partitions)")
    parser.add_argument("--samples", type=int, default=10, help="Metadata requests timed per repetition")
    parser.add_argument("--rate", type=int, default=200, help="producer records per second")
    parser.add_argument("--max-records", type=int, default=200_000, help="producer records at most per run")
    parser.add_argument("--steady-s", type=float, default=5.0,
                        help="seconds the producer writes before the SIGTERM (the steady state)")
    parser.add_argument("--message-timeout-ms", type=int, default=30000,
                        help="the producer's message.timeout.ms: a send not acknowledged by then fails")
    parser.add_argument("--session-timeout-ms", type=int, default=SESSION_TIMEOUT_MS)
    parser.add_argument("--deadline", type=float, default=0, help="seconds any one step may take "
                        "(default: 120 + 0.03 per partition)")
    parser.add_argument("--rolling-restart", action="store_true")
    parser.add_argument("--idle-s", type=float, default=15.0, help="seconds the idle brokers' CPU is measured "
                        "over, before and after the create (0: not measured)")
    parser.add_argument("--only-create", action="store_true", help="measure step 1 (and 6) only")
    parser.add_argument("--no-controller-kill", action="store_true", help="leave out step 5")
    parser.add_argument("--keep-logs", action="store_true", help="copy the brokers' logs out after step 4")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting (e.g. replica.lag.time.max.ms=3000, the test clusters'; default 30000)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                      "scale_bench.json"))
    args = parser.parse_args(argv)
    args.deadline = args.deadline or 120 + 0.03 * args.partitions
    return args


@contextmanager
def broker_start_deadline(seconds: float) -> Iterator[None]:
    """logbus.testing gives a starting broker 15 s to listen; one recovering 100,000 partitions
    may need more, and this bench reports how long it took instead of failing."""
    saved = logbus.testing.READY_TIMEOUT_S, logbus.testing.CLUSTER_READY_TIMEOUT_S
    logbus.testing.READY_TIMEOUT_S = max(saved[0], seconds)
    logbus.testing.CLUSTER_READY_TIMEOUT_S = max(saved[1], seconds)  # dozens of brokers registering at once
    try:
        yield
    finally:
        logbus.testing.READY_TIMEOUT_S, logbus.testing.CLUSTER_READY_TIMEOUT_S = saved


def commit() -> str:
    """The checkout's commit (the brokers run its code), or "" outside a git checkout."""
    found = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, check=False)
    return found.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    compileall.compile_dir(os.path.dirname(logbus.__file__), quiet=1)  # else every broker start compiles them
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit(),
                               "args": {k: v for k, v in vars(args).items() if k != "out"},
                               "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()[0], "reps": []}
    rep, figures = (rolling_rep, ROLLING_FIGURES) if args.rolling_restart else (measure_rep, FIGURES)
    with broker_start_deadline(args.deadline):
        for number in range(args.reps):
            results["reps"].append(rep(args))
            print(f"repetition {number + 1}: {json.dumps(results['reps'][-1])}", flush=True)
    results["summary"] = summarize(results["reps"], figures, args.session_timeout_ms)
    print_table(results["summary"])
    write_results(args.out, results)
    print(f"results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
