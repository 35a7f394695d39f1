"""TLS and SASL_SSL against PLAINTEXT on one logbus broker, in the same run; SCRAM logins per second.

    .venv/bin/python bench/security_bench.py [--records 200000] [--reps 2] [--out bench/results/security_bench.json]

One broker with four listeners, PLAINTEXT, SSL, SASL_SSL and SASL_PLAINTEXT (certificates from
`logbus certs`; TLS 1.3, OpenSSL's default cipher, no client certificate; SASL users made with
`logbus users set` before the broker starts), and confluent-kafka clients:

1. Produce: 1 KB records (`linger.ms` 5, acks=all on one broker) into a fresh one-partition
   topic per run, over SSL, SASL_SSL (SCRAM-SHA-512) and PLAINTEXT in turn (target: TLS >= 0.6x
   plaintext). The client's CPU seconds are recorded too, and one more produce goes through
   a relay that reads the sizes of the TLS records the client sends (`bench/tls_records.py`).
   Records of those sizes are then decrypted by OpenSSL alone, in-process, and sent to
   `bench/tls_sink.py`, a process that only receives them (uvloop's TLS transport, as the
   broker; a memory-BIO loop; plaintext); with the client's CPU over TLS and the broker's over
   plaintext, the cheapest receiver bounds the ratio two cores can give (`ceiling`, below).
2. Consume: one topic filled once, read from the start in batches of 10,000 (`consume`) over
   the same three in turn (target >= 0.6x). On loopback the broker copies fetched bytes on every
   listener (`socket.sendfile=remote`), so the ratio is the cost of TLS itself.
3. SCRAM logins: fresh connections to the SASL_PLAINTEXT listener, each a full SaslHandshake and
   SCRAM exchange (logbus's own inter-broker login, `cluster/sasl_login.py`), 8 at a time for a
   few seconds, per mechanism at the default 4,096 iterations: logins per second.

The broker's CPU seconds are recorded for each run. Loopback only; every loop is bounded by its
record count and a deadline.

The produce `ceiling`: over TLS the client spends its measured CPU, and the broker at least what
it spends over plaintext plus what the cheapest receiver measured spends on TLS beyond taking
the same bytes in as plaintext (a Python process cannot receive the records for less, whatever
it then does with them). With both cores busy all the time (never quite so), a TLS run takes at
least the sum of those over the core count, so the ratio can be at most plaintext's time over
that.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.one_broker import QUIET, consume, cpu_seconds, new_topic, produce, timed, write_results  # noqa: E402
from bench.tls_records import SINK_MODES, RecordTap, decrypt_seconds, receive_seconds  # noqa: E402
from logbus.cluster.frame_stream import open_frame_stream  # noqa: E402
from logbus.cluster.sasl_login import MAX_TOKEN_FRAME, InterBrokerLogin  # noqa: E402
from logbus.security.sasl_client import SaslLogin  # noqa: E402
from logbus.testing import BrokerProcess, free_test_port, running_broker  # noqa: E402

RESULTS = os.path.join(os.path.dirname(__file__), "results")
VALUE = b"v" * 1024
LISTENERS = ("SSL", "SASL_SSL", "PLAINTEXT")
USER, PASSWORD = "bench", "bench-secret"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
LOGIN_CONCURRENCY = 8
LOGIN_SECONDS = 5.0
RECEIVER_REPS = 3
PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,TAPPED:SSL"


def make_certs(directory: str) -> None:
    subprocess.run([sys.executable, "-m", "logbus", "certs", "--out", directory], check=True, capture_output=True)


def add_users(data_dir: str, directory: str) -> None:
    """The bench user, for both SCRAM mechanisms, in the store before the broker starts."""
    password_file = os.path.join(directory, "password")
    with open(password_file, "w", encoding="utf-8") as handle:
        handle.write(PASSWORD + "\n")
    for mechanism in SCRAM_MECHANISMS:
        subprocess.run([sys.executable, "-m", "logbus", "users", "set", USER, "--password-file", password_file,
                        "--mechanism", mechanism, "--data-dir", data_dir], check=True, capture_output=True)


def client_config(broker: BrokerProcess, listener: str, certs: str) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{broker.ports[listener]}", **QUIET}
    if listener in ("SSL", "SASL_SSL"):
        config |= {"security.protocol": listener, "ssl.ca.location": os.path.join(certs, "ca.pem")}
    if listener == "SASL_SSL":
        config |= {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER, "sasl.password": PASSWORD}
    return config


def compare(name: str, runs: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    rates = {kind: statistics.median(r["records_s"] for r in rs) for kind, rs in runs.items()}
    ratios = {kind: round(rates[kind] / rates["PLAINTEXT"], 3) for kind in LISTENERS if kind != "PLAINTEXT"}
    print(f"{name}: " + ", ".join(f"{kind} {rate:,.0f}/s" for kind, rate in rates.items())
          + "; against PLAINTEXT " + ", ".join(f"{kind} {ratio:.2f}x" for kind, ratio in ratios.items()), flush=True)
    return {"median_records_s": rates, "ratio": ratios["SSL"], "ratios": ratios, "runs": runs}


def tls_record_floor(broker: BrokerProcess, tap_port: int, certs: str, records: int) -> dict[str, Any]:
    """Produce `records` records through the relay in front of the TAPPED listener (an SSL one
    advertised at `tap_port`); then what OpenSSL alone spends decrypting records of the sizes seen,
    and what a process that only receives them spends (least of `RECEIVER_REPS` runs per mode)."""
    tap = RecordTap(tap_port, broker.ports["TAPPED"])
    try:
        config = {**client_config(broker, "SSL", certs), "bootstrap.servers": f"127.0.0.1:{tap_port}"}
        produce(config, new_topic(client_config(broker, "PLAINTEXT", certs)), records, VALUE)
    finally:
        tap.close()
    sizes = tap.sizes
    if not sizes:
        raise RuntimeError("no TLS record passed the relay: did the client bypass the advertised address?")
    pem, ca = os.path.join(certs, "broker.pem"), os.path.join(certs, "ca.pem")
    floor = decrypt_seconds(sizes, pem, ca)
    receivers = {mode: min(receive_seconds(sizes, pem, ca, mode, free_test_port()) for _ in range(RECEIVER_REPS))
                 for mode in SINK_MODES}
    mean, small = statistics.mean(sizes), sum(1 for size in sizes if size < 1024) / len(sizes)
    print(f"TLS records from the producer: {len(sizes):,} for {records:,} records, mean {mean:,.0f} B, "
          f"{small:.0%} under 1 KB; OpenSSL decrypts them in {floor:.3f} CPU-s; a process only receiving "
          f"them spends {receivers['uvloop-tls']:.3f} CPU-s through uvloop's TLS transport, "
          f"{receivers['memory-bio']:.3f} through a memory-BIO loop, {receivers['plaintext']:.3f} as plaintext",
          flush=True)
    return {"records": len(sizes), "mean_bytes": round(mean), "share_under_1k": round(small, 3),
            "openssl_decrypt_cpu_s": round(floor, 3),
            "receiver_cpu_s": {mode: round(seconds, 3) for mode, seconds in receivers.items()}}


def tls_receive_extra(floor: dict[str, Any]) -> float:
    """CPU seconds the cheapest TLS receiver measured spends beyond receiving the same plaintext."""
    receivers = floor["receiver_cpu_s"]
    return min(receivers["uvloop-tls"], receivers["memory-bio"]) - receivers["plaintext"]


def produce_ceiling(produced: dict[str, list[dict[str, float]]], records: int, tls_extra_s: float) -> float:
    """The TLS/plaintext produce ratio two fully busy cores could give at best (module docstring)."""
    def median(listener: str, key: str) -> float:
        return statistics.median(run[key] for run in produced[listener])

    plaintext_s = records / median("PLAINTEXT", "records_s")
    cores = os.cpu_count() or 1
    tls_least_s = (median("SSL", "client_cpu_s") + median("PLAINTEXT", "broker_cpu_s") + tls_extra_s) / cores
    ceiling = plaintext_s / tls_least_s
    print(f"produce over TLS at best {ceiling:.2f}x plaintext on {cores} cores: client "
          f"{median('SSL', 'client_cpu_s'):.2f} CPU-s over TLS ({median('PLAINTEXT', 'client_cpu_s'):.2f} over "
          f"plaintext), broker {median('PLAINTEXT', 'broker_cpu_s'):.2f} over plaintext + {tls_extra_s:.2f} to "
          f"receive TLS, against {plaintext_s:.2f} s over plaintext", flush=True)
    return round(ceiling, 3)


async def logins_per_second(broker: BrokerProcess, mechanism: str) -> dict[str, float]:
    """Full SCRAM logins on fresh connections, LOGIN_CONCURRENCY at a time for LOGIN_SECONDS, and
    the broker's CPU per login. The rate is bound by this client: scramp's client derives the
    salted password in pure Python (~25 ms at 4,096 iterations, against ~2.5 ms for hashlib),
    so the broker's CPU per login is the measure of what a broker can take."""
    port, pid = broker.ports["SASL_PLAINTEXT"], broker.process.pid
    login = InterBrokerLogin(SaslLogin(mechanism, USER, PASSWORD))
    deadline = time.perf_counter() + LOGIN_SECONDS
    done = 0

    async def one_after_another() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            stream = await open_frame_stream("127.0.0.1", port, MAX_TOKEN_FRAME)
            try:
                await login.authenticate(stream, "logbus-bench")
                done += 1
            finally:
                stream.close()

    cpu_before, started = cpu_seconds(pid), time.perf_counter()
    await asyncio.gather(*(one_after_another() for _ in range(LOGIN_CONCURRENCY)))
    rate = done / (time.perf_counter() - started)
    broker_ms = (cpu_seconds(pid) - cpu_before) / max(done, 1) * 1000
    print(f"SCRAM logins, {mechanism}: {rate:,.0f}/s ({LOGIN_CONCURRENCY} at a time, client-bound); broker CPU "
          f"{broker_ms:.2f} ms per login", flush=True)
    return {"logins_s": round(rate), "logins": done, "concurrency": LOGIN_CONCURRENCY,
            "broker_cpu_ms_per_login": round(broker_ms, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(RESULTS, "security_bench.json"))
    args = parser.parse_args()
    results: dict[str, Any] = {"records": args.records, "value_bytes": len(VALUE)}
    with tempfile.TemporaryDirectory(prefix="logbus-tls-bench-") as certs:
        make_certs(certs)
        data_dir = os.path.join(certs, "data")
        add_users(data_dir, certs)
        tap_port = free_test_port()
        config = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0,"
                               "SASL_PLAINTEXT://127.0.0.1:0,TAPPED://127.0.0.1:0",
                  "listener.security.protocol.map": PROTOCOL_MAP,
                  "advertised.listeners": f"TAPPED://127.0.0.1:{tap_port}",
                  "ssl.keystore.type": "PEM", "ssl.keystore.location": os.path.join(certs, "broker.pem")}
        with running_broker(config=config, data_dir=data_dir) as broker:
            clients = {listener: client_config(broker, listener, certs) for listener in LISTENERS}
            produced: dict[str, list[dict[str, float]]] = {listener: [] for listener in LISTENERS}
            for _ in range(args.reps):
                for listener in LISTENERS:
                    topic = new_topic(clients["PLAINTEXT"])
                    produced[listener].append(timed(broker.process.pid, lambda c=clients[listener], t=topic: produce(
                        c, t, args.records, VALUE), args.records, len(VALUE)))
            results["produce"] = compare("produce", produced)
            results["tls_records"] = tls_record_floor(broker, tap_port, certs, args.records)
            results["produce"]["ceiling"] = produce_ceiling(
                produced, args.records, tls_receive_extra(results["tls_records"]))
            topic = new_topic(clients["PLAINTEXT"])
            produce(clients["PLAINTEXT"], topic, args.records, VALUE)
            consumed: dict[str, list[dict[str, float]]] = {listener: [] for listener in LISTENERS}
            for _ in range(args.reps):
                for listener in LISTENERS:
                    consumed[listener].append(timed(
                        broker.process.pid, lambda c=clients[listener]: consume(c, topic, args.records), args.records,
                        len(VALUE)))
            results["consume"] = compare("consume", consumed)
            results["scram_logins"] = {mechanism: asyncio.run(logins_per_second(broker, mechanism))
                                       for mechanism in SCRAM_MECHANISMS}
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
