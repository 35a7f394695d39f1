"""`logbus cluster up` (a local ZooKeeper and N brokers) and `logbus cluster describe`.

`up` is how a user tries replication in a minute: Debian's ZooKeeper on a free loopback port and
N `logbus serve` processes (ids 1..N, ports base-port.., data in DATA_DIR/broker-N, Prometheus
metrics on metrics-base-port..), the bootstrap string printed once all are serving, everything
stopped on Ctrl-C or SIGTERM (the brokers with a controlled shutdown, ZooKeeper last). Data and
the ZooKeeper state stay in DATA_DIR, so a second `up` continues the same cluster.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from .common import CliError, add_connection_options, client_config, import_confluent_kafka

READY_TIMEOUT_S = 30.0
DEFAULT_METRICS_PORT = 9404  # the Prometheus JMX exporter's usual port
CHROOT = "/logbus"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cluster", help="a local cluster, or describe one")
    commands = parser.add_subparsers(dest="cluster_command", required=True)
    up = commands.add_parser("up", help="start ZooKeeper and N brokers here; Ctrl-C stops them")
    up.add_argument("--brokers", type=int, default=3, help="how many brokers (default 3)")
    up.add_argument("--data-dir", default="./cluster", help="where data and ZooKeeper state go (default ./cluster)")
    up.add_argument("--base-port", type=int, default=9092, help="port of broker 1; broker N gets base + N - 1")
    up.add_argument("--metrics-base-port", type=int, default=DEFAULT_METRICS_PORT,
                    help=f"metrics.port of broker 1 (default {DEFAULT_METRICS_PORT}); broker N gets base + N - 1; "
                    "0: no metrics")
    up.add_argument("--zookeeper-port", type=int, default=0, help="ZooKeeper's port (default: a free one)")
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config key for every broker")
    up.set_defaults(run=run_up)
    describe = commands.add_parser("describe", help="brokers, controller, under-replicated and offline partitions")
    add_connection_options(describe)
    describe.set_defaults(run=run_describe)


# ---------------------------------------------------------------------------- up


def run_up(args: argparse.Namespace) -> int:
    from ..cluster.zookeeper_server import ZooKeeperNotInstalledError, ZooKeeperServer

    if args.brokers < 1:
        raise CliError("--brokers must be at least 1")
    data_dir = os.path.abspath(args.data_dir)
    ports = [args.base_port + i for i in range(args.brokers)]
    metrics_ports = [args.metrics_base_port + i for i in range(args.brokers)] if args.metrics_base_port else []
    taken = [port for port in ports if not port_free(port)]
    if taken:
        raise CliError(f"port {taken[0]} is in use: give another --base-port")
    taken = [port for port in metrics_ports if not port_free(port)]
    if taken:
        raise CliError(f"port {taken[0]} is in use: give another --metrics-base-port (0: no metrics)")
    zookeeper = ZooKeeperServer(os.path.join(data_dir, "zookeeper"), port=args.zookeeper_port)
    try:
        zookeeper.start()
    except ZooKeeperNotInstalledError as exc:
        raise CliError(str(exc)) from None
    brokers: list[subprocess.Popen] = []
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        for broker_id, port in enumerate(ports, start=1):
            metrics = [f"metrics.port={metrics_ports[broker_id - 1]}"] if metrics_ports else []
            brokers.append(_start_broker(broker_id, port, data_dir, zookeeper.connect_string, metrics + args.set))
        _wait_serving(brokers, ports, stop)
        if not stop.is_set():
            print(f"logbus cluster of {args.brokers} brokers; ZooKeeper at {zookeeper.connect_string}{CHROOT}",
                  flush=True)
            print(f"bootstrap servers: {','.join(f'127.0.0.1:{port}' for port in ports)}", flush=True)
            if metrics_ports:
                print(f"metrics: {' '.join(f'http://127.0.0.1:{port}/metrics' for port in metrics_ports)}",
                      flush=True)
            print("Ctrl-C stops the cluster.", flush=True)
        while not stop.wait(0.5):
            if any(broker.poll() is not None for broker in brokers):
                print("logbus: a broker exited; see its broker.log. Stopping the cluster.", file=sys.stderr)
                break
    finally:
        _stop_all(brokers)
        zookeeper.stop()
    print("cluster stopped", flush=True)
    return 0


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _start_broker(broker_id: int, port: int, data_dir: str, zookeeper: str, settings: list[str]) -> subprocess.Popen:
    directory = os.path.join(data_dir, f"broker-{broker_id}")
    os.makedirs(directory, exist_ok=True)
    command = [sys.executable, "-m", "logbus", "serve", "--data-dir", os.path.join(directory, "data"),
               "--host", "127.0.0.1", "--port", str(port), "--broker-id", str(broker_id),
               "--set", f"zookeeper.connect={zookeeper}{CHROOT}"]
    for setting in settings:
        command += ["--set", setting]
    log = open(os.path.join(directory, "broker.log"), "ab")  # noqa: SIM115 - the child keeps it
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               start_new_session=True)
    log.close()
    return process


def _wait_serving(brokers: list[subprocess.Popen], ports: list[int], stop: threading.Event) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    waiting = set(ports)
    while waiting and not stop.is_set():
        if time.monotonic() > deadline or any(broker.poll() is not None for broker in brokers):
            raise CliError("the brokers did not start; see broker.log in each broker's directory")
        waiting = {port for port in waiting if port_free(port)}
        stop.wait(0.1)


def _stop_all(brokers: list[subprocess.Popen]) -> None:
    """SIGTERM to every broker at once (controlled shutdowns run in parallel), then wait."""
    for broker in brokers:
        if broker.poll() is None:
            broker.send_signal(signal.SIGTERM)
    for broker in brokers:
        try:
            broker.wait(60)
        except subprocess.TimeoutExpired:
            broker.kill()
            broker.wait()


# ---------------------------------------------------------------------------- describe


def run_describe(args: argparse.Namespace) -> int:
    kafka = import_confluent_kafka()
    admin = kafka.admin.AdminClient(client_config(args))
    try:
        cluster = admin.describe_cluster(request_timeout=args.timeout).result(args.timeout)
        metadata = admin.list_topics(timeout=args.timeout)
    except kafka.KafkaException as exc:
        raise CliError(f"cannot describe the cluster at {args.bootstrap_server}: {exc.args[0].str()}") from None
    print(format_cluster(cluster, metadata))
    return 0


def format_cluster(cluster: Any, metadata: Any) -> str:
    controller = cluster.controller.id if cluster.controller is not None else "none"
    lines = [f"Cluster: {cluster.cluster_id}\tController: {controller}\tBrokers: {len(cluster.nodes)}"]
    for node in sorted(cluster.nodes, key=lambda n: n.id):
        lines.append(f"\tBroker: {node.id}\tHost: {node.host}:{node.port}\tRack: {node.rack or '-'}")
    under, offline = [], []
    for name, topic in sorted(metadata.topics.items()):
        for partition in sorted(topic.partitions.values(), key=lambda p: p.id):
            where = f"{name}-{partition.id}"
            if partition.leader < 0:
                offline.append(where)
            elif len(partition.isrs) < len(partition.replicas):
                under.append(f"{where} (isr {','.join(map(str, partition.isrs))} of "
                             f"{','.join(map(str, partition.replicas))})")
    lines.append(f"UnderReplicatedPartitions: {len(under)}")
    lines += [f"\t{entry}" for entry in under]
    lines.append(f"OfflinePartitions: {len(offline)}")
    lines += [f"\t{entry}" for entry in offline]
    return "\n".join(lines)
