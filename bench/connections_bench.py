"""What hostile and idle connections cost a broker (issue 11 item 4).

    .venv/bin/python bench/connections_bench.py [--slowloris 500] [--idle 2000] [--seconds 20]

Starts a broker (logbus.testing, default config) and a control client that produces one 1 KB
record at a time (Produce v9, acks=1, on its own connection) and times each answer. Then opens
`--idle` connections that send nothing and `--slowloris` connections that each send a 100 MB size
prefix and then one byte per second, and keeps the control client producing for `--seconds`.
Reports the broker's RSS before and during (peak), the control client's produce p50/p99 before
and during, and whether the targets hold: RSS under load < 200 MB, p99 < 50 ms.
Loopback only; every loop is bounded by a deadline.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import resource
import socket
import statistics
import struct
import sys
import threading
import time

from broker_bench import rss_mib  # run as a script: bench/ is on sys.path
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.produce.v9 import request as produce_v9
from raw_client import Client

from logbus.protocol.records import build_batch
from logbus.testing import running_broker

TOPIC = "connections-bench"
RSS_TARGET_MB, P99_TARGET_MS = 200, 50


def create_topic(client: Client) -> None:
    request = metadata_v12.MetadataRequest(
        topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name=TOPIC),),
        allow_auto_topic_creation=True, include_topic_authorized_operations=False,
    )
    client.call(3, 12, request)


def produce_latencies(client: Client, seconds: float) -> list[float]:
    """Produce one 1 KB record at a time for `seconds`; the latency of each, in ms."""
    latencies = []
    value = b"v" * 1024
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        batch = build_batch([(None, value)], int(time.time() * 1000))
        request = produce_v9.ProduceRequest(
            transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=10),
            topic_data=(produce_v9.TopicProduceData(
                name=TOPIC, partition_data=(produce_v9.PartitionProduceData(index=0, records=batch),)),),
        )
        began = time.perf_counter()
        client.call(0, 9, request)
        latencies.append((time.perf_counter() - began) * 1000)
        time.sleep(0.005)  # ~150 requests/s: a steady producer, not a saturating one
    return latencies


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def open_connections(port: int, count: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(count)]


def trickle(sockets: list[socket.socket], stop: threading.Event) -> None:
    """One byte per second on each slowloris connection (the frame they announced never completes)."""
    while not stop.wait(1.0):
        for sock in sockets:
            with contextlib.suppress(OSError):  # a closed one is reported at the end
                sock.send(b"x")


def raise_open_files_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(needed, soft)), hard))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slowloris", type=int, default=500)
    parser.add_argument("--idle", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    raise_open_files_limit(args.slowloris + args.idle + 256)
    with running_broker() as broker:
        pid = broker.process.pid
        control = Client(broker.port)
        create_topic(control)
        produce_latencies(control, 1.0)  # warm up
        before_latencies = produce_latencies(control, 5.0)
        rss_before = rss_mib(pid)
        idle = open_connections(broker.port, args.idle)
        slow = open_connections(broker.port, args.slowloris)
        for sock in slow:
            sock.sendall(struct.pack(">i", 100 << 20) + b"\x00\x00" + b"x" * 100)
        stop = threading.Event()
        trickler = threading.Thread(target=trickle, args=(slow, stop), daemon=True)
        trickler.start()
        peak = [rss_mib(pid)]
        sampler_stop = threading.Event()

        def sample() -> None:
            while not sampler_stop.wait(0.25):
                peak.append(rss_mib(pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        during_latencies = produce_latencies(control, args.seconds)
        stop.set()
        sampler_stop.set()
        trickler.join()
        sampler.join()
        open_at_end = sum(1 for sock in idle + slow if _still_open(sock))
        for sock in idle + slow:
            sock.close()
    result = {
        "idle_connections": args.idle, "slowloris_connections": args.slowloris,
        "connections_still_open_at_end": open_at_end,
        "broker_rss_mb_before": round(rss_before, 1), "broker_rss_mb_peak_during": round(max(peak), 1),
        "produce_p50_ms_before": round(statistics.median(before_latencies), 2),
        "produce_p99_ms_before": round(percentile(before_latencies, 0.99), 2),
        "produce_p50_ms_during": round(statistics.median(during_latencies), 2),
        "produce_p99_ms_during": round(percentile(during_latencies, 0.99), 2),
        "produce_requests_during": len(during_latencies),
    }
    result["targets_met"] = (result["broker_rss_mb_peak_during"] < RSS_TARGET_MB
                             and result["produce_p99_ms_during"] < P99_TARGET_MS)
    print(json.dumps(result, indent=2))
    return 0 if result["targets_met"] else 1


def _still_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
