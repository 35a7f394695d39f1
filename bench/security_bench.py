"""TLS and SASL_SSL against PLAINTEXT on one logbus broker, in the same run; SCRAM logins per second.

    .venv/bin/python bench/security_bench.py [--records 200000] [--reps 2] [--out bench/results/security_bench.json]

One broker with four listeners, PLAINTEXT, SSL, SASL_SSL and SASL_PLAINTEXT (certificates from
`logbus certs`; TLS 1.3, OpenSSL's default cipher, no client certificate; SASL users made with
`logbus users set` before the broker starts), and confluent-kafka clients:

1. Produce: 1 KB records (`linger.ms` 5, acks=all on one broker) into a fresh one-partition
   topic per run, over SSL, SASL_SSL (SCRAM-SHA-512) and PLAINTEXT in turn (target: TLS >= 0.6x
   plaintext).
2. Consume: one topic filled once, read from the start in batches of 10,000 (`consume`) over
   the same three in turn (target >= 0.6x). On loopback the broker copies fetched bytes on every
   listener (`socket.sendfile=remote`), so the ratio is the cost of TLS itself.
3. SCRAM logins: fresh connections to the SASL_PLAINTEXT listener, each a full SaslHandshake and
   SCRAM exchange (logbus's own inter-broker login, `cluster/sasl_login.py`), 8 at a time for a
   few seconds, per mechanism at the default 4,096 iterations: logins per second.

The broker's CPU seconds are recorded for each run. Loopback only; every loop is bounded by its
record count and a deadline.
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
from logbus.cluster.sasl_login import SaslLogin  # noqa: E402
from logbus.testing import BrokerProcess, running_broker  # noqa: E402

RESULTS = os.path.join(os.path.dirname(__file__), "results")
VALUE = b"v" * 1024
LISTENERS = ("SSL", "SASL_SSL", "PLAINTEXT")
USER, PASSWORD = "bench", "bench-secret"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
LOGIN_CONCURRENCY = 8
LOGIN_SECONDS = 5.0


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


async def logins_per_second(broker: BrokerProcess, mechanism: str) -> dict[str, float]:
    """Full SCRAM logins on fresh connections, LOGIN_CONCURRENCY at a time for LOGIN_SECONDS, and
    the broker's CPU per login. The rate is bound by this client: scramp's client derives the
    salted password in pure Python (~25 ms at 4,096 iterations, against ~2.5 ms for hashlib),
    so the broker's CPU per login is the measure of what a broker can take."""
    port, pid = broker.ports["SASL_PLAINTEXT"], broker.process.pid
    login = SaslLogin(mechanism, USER, PASSWORD)
    deadline = time.perf_counter() + LOGIN_SECONDS
    done = 0

    async def one_after_another() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                await login.authenticate(reader, writer, "logbus-bench")
                done += 1
            finally:
                writer.close()

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
        config = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0,"
                               "SASL_PLAINTEXT://127.0.0.1:0",
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
