"""The workloads, each alternating between systems inside every repetition (logbus, peer, peer, ..., again).

Produce and latency runs get a fresh server process each; consume and fan-out share one backlog per
system (filled once, untimed) and alternate reads over it; the large-log runs alternate produce into
a broker that holds the large log and into a fresh topic of the same broker.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager, suppress
from functools import partial

from bench.suite import kafka_load, limits
from bench.suite.install import Tools
from bench.suite.procmon import process_tree
from bench.suite.profile import Profiler
from bench.suite.runner import Runner, WorkerProcess, run_worker
from bench.suite.systems import KAFKA_SYSTEMS, Server, make_server

SIZES = (100, 1000)
PARTITIONS = (1, 8)
ACKS = ("1", "all")
LATENCY_RATES = (1000, 10_000, 50_000)
FANOUT_GROUPS = 4
# Client processes per produce run, for every system alike: one rdkafka_performance producing 100 B
# records used ~1.45 of the 2 cores and was the limit; two make the machine the limit instead.
PRODUCERS = 2
REDIS_BENCHMARK_MAX = {100: 1_000_000, 1000: 300_000}  # a few seconds each: it has no time bound of its own
# Redis and NATS readers stop after 2 × worker_seconds and read under 250k records/s: a longer
# backlog than this would only lengthen their (untimed, minutes-long) fill, not change their rate.
PY_READER_BACKLOG = 1_024_000
NOIDA_LARGE_LOG_MAX_GB = 2.0  # noida-db's RSS grew with its log (1.7 GB RSS for 1 GB) on this 23 GB machine
PRODUCE_SYSTEMS = ("logbus", "tansu", "noida", "redis", "redis-benchmark", "nats")
READ_SYSTEMS = ("logbus", "tansu", "noida", "redis", "nats")
CLIENTS = {"kafka": "rdkafka_performance", "redis": "redis-py (pipeline 1000)",
           "redis-benchmark": "redis-benchmark (-P 1000 -c 1)", "nats": "nats-py (async acks)"}


def _family(system: str) -> str:
    return "kafka" if system in KAFKA_SYSTEMS else ("redis" if system.startswith("redis") else "nats")


def _client(system: str) -> str:
    return CLIENTS.get(system, CLIENTS[_family(system)])


def _names(partitions: int, prefix: str = "s") -> list[str]:
    return [f"{prefix}{index}" for index in range(partitions)]


def _server(system: str, tools: Tools, durable: bool = True) -> Server:
    return make_server("redis" if system == "redis-benchmark" else system, tools, durable)


def _produce_once(runner: Runner, tools: Tools, system: str, size: int, partitions: int, acks: str,
                  count: int) -> dict:
    """One fresh server, one produce run; returns the metrics (records/s, MB/s)."""
    settings = runner.settings
    family = _family(system)
    labels = {"workload": "produce", "case": f"{size} B, {partitions} partition(s), acks={acks}",
              "system": system, "client": _client(system), "clients": PRODUCERS}
    if runner.time_left() <= 0:
        return runner.measure(labels, None, dict)  # records the skip without starting a server
    with _server(system, tools, durable=acks == "all") as server:
        if family == "kafka":
            kafka_load.create_topic(server.endpoint, "bench", partitions)
            one = lambda share: kafka_load.produce(tools.rdkafka_performance, server.endpoint, "bench",  # noqa: E731
                                                   size, share, acks, settings.run_timeout_s)
        elif system == "redis-benchmark":
            count = min(count, REDIS_BENCHMARK_MAX[size])
            one = lambda share: _redis_benchmark(server.port, size, partitions, share,  # noqa: E731
                                                 settings.run_timeout_s)
        elif family == "redis":
            one = lambda share: _rate(run_worker("redis_produce", settings.run_timeout_s,  # noqa: E731
                                                 port=server.port, streams=_names(partitions), size=size,
                                                 count=share, seconds=settings.worker_seconds), size)
        else:
            run_worker("nats_setup", 60, port=server.port, streams=_names(partitions))
            one = lambda share: _rate(run_worker("nats_produce", settings.run_timeout_s,  # noqa: E731
                                                 port=server.port, subjects=_names(partitions), size=size,
                                                 count=share, seconds=settings.worker_seconds), size)
        return runner.measure(labels, server.pid, partial(_in_parallel, one, count, size))


def _in_parallel(run_one: Callable[[int], dict], count: int, size: int) -> dict:
    """PRODUCERS client processes at once, each with its share of `count`: all their records over
    the slowest one's time (each times itself from its own first record)."""
    shares = [count // PRODUCERS + (1 if i < count % PRODUCERS else 0) for i in range(PRODUCERS)]
    with ThreadPoolExecutor(PRODUCERS) as pool:
        return _together(list(pool.map(run_one, shares)), size)


def _together(runs: list[dict], size: int) -> dict:
    """Client processes that ran at once: all their records over the slowest one's time."""
    return _rate({"records": sum(run["records"] for run in runs),
                  "seconds": max(run["seconds"] for run in runs)}, size)


def _rate(result: dict, size: int) -> dict:
    seconds = max(result["seconds"], 1e-9)
    return {"records_s": result["records"] / seconds, "mb_s": result["records"] * size / seconds / 1e6,
            "records": result["records"], "seconds": seconds}


def _redis_benchmark(port: int, size: int, streams: int, count: int, timeout_s: float) -> dict:
    """XADD with redis-benchmark: one connection, pipeline 1000, keys s:<n> for n < streams."""
    done = subprocess.run(["redis-benchmark", "-p", str(port), "-n", str(count), "-c", "1", "-P", "1000",
                           "-r", str(streams), "--csv", "XADD", "s:__rand_int__", "*", "d", "x" * size],
                          capture_output=True, text=True, timeout=timeout_s, check=True)
    rate = float(done.stdout.strip().splitlines()[-1].split(",")[1].strip('"'))
    return _rate({"records": count, "seconds": count / rate}, size)


def produce_matrix(runner: Runner, tools: Tools) -> None:
    """Repetition-major: if the phase runs out of time, every case still has its earlier repetitions."""
    for _rep in range(runner.settings.reps):
        for size in SIZES:
            for partitions in PARTITIONS:
                for acks in ACKS:
                    for system in PRODUCE_SYSTEMS:
                        _produce_once(runner, tools, system, size, partitions, acks,
                                      runner.settings.produce_counts[size])


def _fill(runner: Runner, tools: Tools, server: Server, system: str, size: int, count: int) -> None:
    """Write the backlog (untimed for the tables, but bounded)."""
    family, timeout = _family(system), max(runner.time_left(), 60)
    if family == "kafka":
        kafka_load.create_topic(server.endpoint, "backlog", 1)
        kafka_load.produce(tools.rdkafka_performance, server.endpoint, "backlog", size, count, "1", timeout)
    elif family == "redis":
        result = run_worker("redis_produce", timeout, port=server.port, streams=["backlog"], size=size,
                            count=count, seconds=timeout)
        _require(result["records"], count, system)
    else:
        run_worker("nats_setup", 60, port=server.port, streams=["backlog"])
        result = run_worker("nats_produce", timeout, port=server.port, subjects=["backlog"], size=size,
                            count=count, seconds=timeout)
        _require(result["records"], count, system)


def _backlog_records(runner: Runner, system: str, size: int) -> int:
    """`backlog_mb` of records of `size` bytes (so 10x the records at 100 B as at 1 KB)."""
    records = max(runner.settings.backlog_mb * 1_000_000 // size, 1000)
    return records if _family(system) == "kafka" else min(records, PY_READER_BACKLOG)


def _require(got: int, wanted: int, system: str) -> None:
    if got < wanted:
        raise RuntimeError(f"{system}: backlog has {got} of {wanted} records")


def _startups(runner: Runner, tools: Tools, servers: dict[str, Server]) -> dict[str, float]:
    """Each Kafka-protocol system's consumer start-up time, taken off its backlog reads' wall time."""
    startups = {}
    for system, server in servers.items():
        if _family(system) == "kafka":
            startups[system] = kafka_load.startup_seconds(tools.rdkafka_performance, server.endpoint,
                                                          runner.settings.run_timeout_s)
            runner.say(f"{system}: consumer start-up {startups[system]:.3f} s (taken off backlog reads)")
    return startups


def _read_backlog(runner: Runner, tools: Tools, server: Server, system: str, size: int, count: int,
                  group: str, as_group_member: bool, startup_s: float | None = None) -> dict:
    """Read the whole backlog once: Kafka clients by partition assignment, or as a consumer group member."""
    family, timeout = _family(system), runner.settings.run_timeout_s
    seconds = 2 * runner.settings.worker_seconds  # Python readers: a rate over what they read in this bound
    if family == "kafka":
        return kafka_load.consume(tools.rdkafka_performance, server.endpoint, "backlog", count, size, timeout,
                                  group if as_group_member else None, startup_s)
    if family == "redis":
        result = run_worker("redis_consume", timeout, port=server.port, stream="backlog", group=group,
                            count=count, seconds=seconds)
    else:
        result = run_worker("nats_consume", timeout, port=server.port, subject="backlog", count=count,
                            seconds=seconds)
    if not result["records"]:
        raise RuntimeError(f"{system}: read nothing in {seconds} s")
    return _rate(result, size)


def consume_and_fanout(runner: Runner, tools: Tools) -> None:
    """Per record size: fill every system's backlog, then alternate timed reads; fan-out on the 100 B backlog,
    last, as it is the longest and the one a peer may fail slowly."""
    for size in sorted(SIZES, reverse=True):
        with ExitStack() as stack:
            servers: dict[str, Server] = {}
            for system in READ_SYSTEMS:
                if runner.time_left() <= 0:
                    runner.note(f"consume {size} B: no time left to fill {system}'s backlog")
                    continue
                try:
                    server = stack.enter_context(_server(system, tools, durable=False))
                    count = _backlog_records(runner, system, size)
                    runner.say(f"filling {system} with {count:,} records of {size} B")
                    _fill(runner, tools, server, system, size, count)
                    servers[system] = server
                except Exception as error:  # noqa: BLE001 - a peer that cannot fill is noted, not fatal
                    runner.note(f"consume {size} B: {system} skipped, backlog fill failed: {str(error)[:160]}")
            startups = _startups(runner, tools, servers)
            for rep in range(runner.settings.reps):
                for system, server in servers.items():
                    labels = {"workload": "consume", "case": f"{size} B backlog, 1 partition",
                              "system": system, "client": _client(system), "clients": 1}
                    count = _backlog_records(runner, system, size)
                    with _only_running(servers, system):
                        runner.measure(labels, server.pid, partial(_read_backlog, runner, tools, server, system,
                                                                   size, count, f"read-{rep}", False,
                                                                   startups.get(system)))
            if size == SIZES[0]:
                _fanout(runner, tools, servers, size)


def _fanout(runner: Runner, tools: Tools, servers: dict[str, Server], size: int) -> None:
    failed: set[str] = set()
    for rep in range(runner.settings.reps):
        for system, server in servers.items():
            if system in failed or (_family(system) == "kafka" and not _has_groups(runner, server, system)):
                continue
            count = _backlog_records(runner, system, size)
            labels = {"workload": "fan-out", "case": f"{FANOUT_GROUPS} groups x the {size} B backlog",
                      "system": system, "client": _client(system), "clients": FANOUT_GROUPS}

            def step(s: Server = server, n: str = system, r: int = rep, count: int = count) -> dict:
                """All groups read at once; rate from the first record (group join excluded) to the slowest end."""
                def member(g: int) -> dict:
                    return _read_backlog(runner, tools, s, n, size, count, f"fan-{r}-{g}", True)

                with ThreadPoolExecutor(FANOUT_GROUPS) as pool:  # a time-bounded reader: what it read in its bound
                    return _together(list(pool.map(member, range(FANOUT_GROUPS))), size)

            with _only_running(servers, system):
                if runner.measure(labels, server.pid, step) is None and runner.time_left() > 0:
                    failed.add(system)
                    runner.note(f"fan-out: {system} failed once and is not run again (each failure can take "
                                f"the whole {runner.settings.run_timeout_s:.0f} s deadline)")


@contextmanager
def _only_running(servers: dict[str, Server], running: str) -> Iterator[None]:
    """SIGSTOP the other systems' servers while `running` is measured: an idle server is not always
    idle (noida-db kept a core busy for minutes after a 10 M-record fill, in everyone's runs)."""
    others = [pid for name, server in servers.items() if name != running for pid in process_tree(server.pid)]
    _signal_all(others, signal.SIGSTOP)
    try:
        yield
    finally:
        _signal_all(others, signal.SIGCONT)


def _signal_all(pids: list[int], number: int) -> None:
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, number)


def _has_groups(runner: Runner, server: Server, system: str) -> bool:
    try:
        supported = kafka_load.JOIN_GROUP_API_KEY in kafka_load.supported_api_keys(server.endpoint)
    except OSError as error:
        supported = False
        runner.note(f"fan-out: ApiVersions probe of {system} failed: {error}")
    if not supported:
        runner.note(f"fan-out: {system} does not advertise JoinGroup (consumer groups), skipped")
    return supported


def latency(runner: Runner, tools: Tools) -> None:
    settings = runner.settings
    for _rep in range(settings.reps):  # repetition-major, as produce_matrix
        for rate in LATENCY_RATES:
            for system in READ_SYSTEMS:
                labels = {"workload": "latency", "case": f"{rate:,} records/s of 100 B", "system": system,
                          "client": _client(system).replace("rdkafka_performance", "confluent-kafka"),
                          "clients": 2, "offered_rate": rate}
                if runner.time_left() <= 0:
                    runner.measure(labels, None, dict)  # records the skip without starting a server
                    continue
                try:
                    with _server(system, tools) as server:
                        runner.measure(labels, server.pid, lambda s=server, n=system, r=rate: _latency_once(
                            runner, s, n, r))
                except Exception as error:  # noqa: BLE001
                    runner.results.append({**labels, "error": str(error)[:200]})


def _latency_once(runner: Runner, server: Server, system: str, rate: int) -> dict:
    seconds = runner.settings.latency_seconds
    family = _family(system)
    if family == "kafka":
        kafka_load.create_topic(server.endpoint, "latency", 1)
        where = {"bootstrap": server.endpoint, "topic": "latency"}
    elif family == "redis":
        where = {"port": server.port, "stream": "latency"}
    else:
        run_worker("nats_setup", 60, port=server.port, streams=["latency"])
        where = {"port": server.port, "subject": "latency"}
    consumer = WorkerProcess(f"{family}_latency_consume", seconds=seconds + 3, **where)
    consumer.ready(30)
    sent = run_worker(f"{family}_latency_produce", seconds + 60, size=100, rate=rate, seconds=seconds, **where)
    result = consumer.result(seconds + 60)
    return {**result, "achieved_rate": sent["records"] / max(sent["seconds"], 1e-9)}


def large_log(runner: Runner, tools: Tools) -> None:
    """Produce 100 B acks=1 into a fresh topic and into the topic holding the large log, same broker, alternating."""
    settings = runner.settings
    count = settings.produce_counts[100]
    for system in ("logbus", "noida"):
        gigabytes = min(settings.large_log_gb, NOIDA_LARGE_LOG_MAX_GB) if system == "noida" else settings.large_log_gb
        if gigabytes < settings.large_log_gb:
            runner.note(f"large log: noida-db gets {gigabytes:g} GB, not {settings.large_log_gb:g} GB "
                        "(its RSS grows with the log: 1.7 GB RSS at 1 GB)")
        fill_records = int(gigabytes * 1e9 / 1000)
        try:
            with _server(system, tools) as server:
                kafka_load.create_topic(server.endpoint, "big", 1)
                runner.say(f"large log: writing {gigabytes:g} GB into {system}")
                fill = runner.measure({"workload": "large-log fill", "case": f"{gigabytes:g} GB of 1 KB",
                                       "system": system, "client": _client(system), "clients": 1}, server.pid,
                                      partial(kafka_load.produce, tools.rdkafka_performance, server.endpoint,
                                              "big", 1000, fill_records, "1", max(runner.time_left(), 60)))
                if fill is None:
                    continue
                for rep in range(settings.reps):
                    for topic, state in ((f"empty-{rep}", "empty log"), ("big", f"{gigabytes:g} GB log")):
                        if topic != "big":
                            kafka_load.create_topic(server.endpoint, topic, 1)
                        labels = {"workload": "large log", "case": f"produce 100 B into {state}", "system": system,
                                  "client": _client(system), "clients": 1}
                        runner.measure(labels, server.pid, lambda s=server, t=topic: kafka_load.produce(
                            tools.rdkafka_performance, s.endpoint, t, 100, count, "1", settings.run_timeout_s))
        except Exception as error:  # noqa: BLE001
            runner.note(f"large log: {system} failed: {str(error)[:200]}")


def machine_limits(runner: Runner) -> None:
    settings = runner.settings
    for _rep in range(settings.reps):
        for name, step in (
            ("disk write, page cache", lambda: {"mb_s": limits.disk_write_mb_s(settings.disk_mb, False)}),
            ("disk write, fdatasync per 1 MiB", lambda: {"mb_s": limits.disk_write_mb_s(settings.disk_sync_mb, True)}),
            ("loopback TCP, 1 stream", lambda: {"mb_s": limits.loopback_tcp_mb_s(settings.tcp_seconds)}),
        ):
            runner.measure({"workload": "machine", "case": name, "system": "fio" if "disk" in name else "iperf3",
                            "client": "-", "clients": 1}, None, step)


def profile_logbus(runner: Runner, tools: Tools) -> None:
    """py-spy on the logbus broker: produce 100 B and 1 KB, then read the 100 B log back (extra runs, own rows)."""
    raw_dir = runner.settings.raw_dir
    counts = {100: 5_000_000, 1000: 2_000_000}
    timeout = runner.settings.run_timeout_s
    with _server("logbus", tools) as server:
        for size, count in counts.items():
            topic = f"profile-{size}"
            kafka_load.create_topic(server.endpoint, topic, 1)
            labels = {"workload": "profiled (py-spy)", "case": f"produce {size} B, 1 partition, acks=1",
                      "system": "logbus", "client": _client("logbus"), "clients": 1}
            with Profiler(server.pid, os.path.join(raw_dir, f"profile-produce-{size}.txt")):
                runner.measure(labels, server.pid, partial(kafka_load.produce, tools.rdkafka_performance,
                                                           server.endpoint, topic, size, count, "1", timeout))
            labels = {**labels, "case": f"consume {size} B from the start, 1 partition"}
            with Profiler(server.pid, os.path.join(raw_dir, f"profile-consume-{size}.txt")):
                runner.measure(labels, server.pid, partial(kafka_load.consume, tools.rdkafka_performance,
                                                           server.endpoint, topic, count, size, timeout))


PHASES = {"limits": machine_limits, "produce": produce_matrix, "consume": consume_and_fanout,
          "large-log": large_log, "latency": latency, "profile": profile_logbus}
