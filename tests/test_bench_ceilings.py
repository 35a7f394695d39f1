"""The benches' bounds: the TLS record sizes read off a relayed stream, OpenSSL's decryption of
records of given sizes, what a receiving process spends on them (bench/tls_sink.py), and the
ceilings the cluster and transaction benches derive from their measurements. (The benches
themselves are not run here.)"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: `bench` is not installed

from bench import tls_records  # noqa: E402
from bench.cluster_bench import kernel_ceiling  # noqa: E402
from bench.txn_bench import produce_ceiling  # noqa: E402
from logbus.testing import free_test_port  # noqa: E402


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    subprocess.run([sys.executable, "-m", "logbus", "certs", "--out", str(out)], check=True, capture_output=True)
    return out


def tls_record(content_type: int, body: bytes) -> bytes:
    return bytes([content_type, 3, 3]) + len(body).to_bytes(2, "big") + body


def test_records_are_counted_across_any_split_of_the_stream() -> None:
    stream = (tls_record(22, b"h" * 40) + tls_record(23, b"a" * 300) + tls_record(23, b"b" * 17)
              + tls_record(21, b"x" * 2) + tls_record(23, b"c" * 5000))
    for step in (1, 2, 5, 7, 64, len(stream)):
        sizes: list[int] = []
        counter = tls_records._RecordCounter(sizes.extend)
        for at in range(0, len(stream), step):
            counter.feed(stream[at:at + step])
        assert sizes == [305, 22, 5005], step  # application data only, header included


def test_the_relay_passes_a_tls_connection_and_notes_its_records(certs: Path) -> None:
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(certs / "broker.pem")
    listener = socket.create_server(("127.0.0.1", 0))
    received = bytearray()

    def serve() -> None:
        connection, _ = listener.accept()
        with server_context.wrap_socket(connection, server_side=True) as tls:
            while len(received) < 30_000 and (data := tls.recv(65536)):
                received.extend(data)
            tls.sendall(b"done")

    threading.Thread(target=serve, daemon=True).start()
    tap_port = free_test_port()
    tap = tls_records.RecordTap(tap_port, listener.getsockname()[1])
    client_context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    try:
        with client_context.wrap_socket(socket.create_connection(("127.0.0.1", tap_port)),
                                        server_hostname="127.0.0.1") as client:
            client.sendall(b"x" * 10_000)
            client.sendall(b"y" * 20_000)
            assert client.recv(4) == b"done"
        deadline = time.monotonic() + 10
        while sum(tap.sizes) < 30_000 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        tap.close()
        listener.close()
    assert bytes(received) == b"x" * 10_000 + b"y" * 20_000
    payload = [size - tls_records.HEADER_BYTES - tls_records.TLS13_RECORD_OVERHEAD for size in tap.sizes]
    assert sum(size for size in payload if size > 1000) == 30_000  # plus the client's Finished, a few bytes


def test_decrypting_records_costs_cpu_time(certs: Path) -> None:
    seconds = tls_records.decrypt_seconds([16_401] * 50 + [600] * 200, str(certs / "broker.pem"),
                                          str(certs / "ca.pem"))
    assert 0 < seconds < 5


@pytest.mark.parametrize("mode", tls_records.SINK_MODES)
def test_a_receiving_process_times_records_of_given_sizes(certs: Path, mode: str) -> None:
    sizes = [16_401] * 50 + [600] * 200 + [22]  # the last one carries no application byte
    seconds = tls_records.receive_seconds(sizes, str(certs / "broker.pem"), str(certs / "ca.pem"), mode,
                                          free_test_port())
    assert 0 < seconds < 5  # and receive_seconds checked that every application byte arrived


def test_the_kernel_ceiling_counts_the_client_the_rf1_leader_and_the_extra_system_time() -> None:
    rf1 = {"records_s": 400_000, "cpu_user_system_s": {"broker 1": [0.3, 0.2], "broker 2": [0.0, 0.0],
                                                       "client": [0.3, 0.2]}}
    rf3 = {"records_s": 100_000, "cpu_user_system_s": {"broker 1": [0.9, 0.7], "broker 2": [0.4, 0.3],
                                                       "broker 3": [0.4, 0.3], "client": [0.4, 0.2]}}
    # 400 k records: 1 s at RF1; least RF3 CPU = client 0.6 + RF1 leader 0.5 + (1.3 - 0.2) system = 2.2
    assert kernel_ceiling(rf1, rf3, 400_000) == pytest.approx(1.0 / (2.2 / (os.cpu_count() or 1)))


def test_the_transaction_ceiling_takes_the_broker_handling_out_of_each_paired_run() -> None:
    runs = {"transactional": [{"records_s": 200_000, "commit_path_s": 0.5},
                              {"records_s": 100_000, "commit_path_s": 1.0}],
            "idempotent": [{"records_s": 400_000}, {"records_s": 200_000}]}
    # 500 k records: 2.5 s less 0.5 s of handling against 1.25 s, and 5 s less 1 s against 2.5 s
    assert produce_ceiling(runs, 500_000) == pytest.approx(0.625)
