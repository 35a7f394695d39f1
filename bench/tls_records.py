"""What TLS costs a broker at the least, for the records a client really sends (security_bench).

A producer's TLS records are read off the wire by `RecordTap`, a loopback relay in front of a
broker's SSL listener (the broker advertises the relay, so every connection passes it), which
notes the length of each application-data record the client sends. `decrypt_seconds` then has
OpenSSL (Python's `ssl`, memory BIOs, as the broker's event loop uses it) decrypt records of the
same lengths on one side of an in-process TLS 1.3 connection: the CPU seconds any broker built
on this OpenSSL spends on TLS for that traffic, with nothing of its own added. `receive_seconds`
sends records of those lengths over loopback to `bench/tls_sink.py`, a process that only receives
them (through uvloop's TLS transport, as the broker does, or the leanest memory-BIO loop, or as
plaintext): what taking that traffic in costs a Python process, before any Kafka work.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress

APPLICATION_DATA = 23
HEADER_BYTES = 5
TLS13_RECORD_OVERHEAD = 17  # the inner content type byte and the 16-byte AEAD tag
MAX_PLAINTEXT = 16384
PUMP_BYTES = 1 << 18
SINK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tls_sink.py")
SINK_MODES = ("uvloop-tls", "memory-bio", "plaintext")
SINK_TIMEOUT_S = 120.0


class RecordTap:
    """A relay on `port` to 127.0.0.1:`target_port`; `sizes` are the lengths of the
    application-data records clients sent through it. Stops (connections closed) on `close`."""

    def __init__(self, port: int, target_port: int) -> None:
        self.target_port = target_port
        self.sizes: list[int] = []
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, _RecordCounter(self._add)), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, None), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, counter: _RecordCounter | None) -> None:
        with suppress(OSError):
            while data := source.recv(PUMP_BYTES):
                if counter is not None:
                    counter.feed(data)
                sink.sendall(data)
        for sock in (source, sink):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _add(self, sizes: list[int]) -> None:
        with self._lock:
            self.sizes += sizes


class _RecordCounter:
    """Walks one direction of a TLS stream record by record without keeping its bytes, handing
    the wire sizes of the application-data records in each piece fed to `found`."""

    def __init__(self, found: Callable[[list[int]], None]) -> None:
        self.found = found
        self.header = bytearray()
        self.skip = 0  # bytes of the current record's body still to pass

    def feed(self, data: bytes) -> None:
        found, at = [], 0
        while at < len(data):
            if self.skip:
                step = min(self.skip, len(data) - at)
                self.skip -= step
                at += step
                continue
            need = HEADER_BYTES - len(self.header)
            self.header += data[at:at + need]
            at += min(need, len(data) - at)
            if len(self.header) == HEADER_BYTES:
                self.skip = int.from_bytes(self.header[3:5], "big")
                if self.header[0] == APPLICATION_DATA:
                    found.append(self.skip + HEADER_BYTES)
                self.header.clear()
        self.found(found)


def decrypt_seconds(sizes: list[int], certificate_pem: str, ca_pem: str) -> float:
    """CPU seconds OpenSSL spends receiving TLS 1.3 records of these wire sizes (header included):
    each written into the server's memory BIO and read out, as the broker's event loop does."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(certificate_pem)
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    client = _client_context(ca_pem).wrap_bio(client_in, client_out)
    _handshake(client, server, client_in, client_out, server_in, server_out)
    wire = _encrypt(client, client_out, sizes)
    into = memoryview(bytearray(PUMP_BYTES))
    started = time.process_time()
    for chunk in wire:
        server_in.write(chunk)
        with suppress(ssl.SSLWantReadError):
            while server.read(PUMP_BYTES, into):
                pass
    return time.process_time() - started


def receive_seconds(sizes: list[int], certificate_pem: str, ca_pem: str, mode: str, port: int) -> float:
    """CPU seconds `bench/tls_sink.py` in `mode` (one of `SINK_MODES`) spends receiving TLS 1.3
    records of these wire sizes, or for `plaintext` the same application bytes in 1 MB writes.
    The records are encrypted before the clock starts; the sink times itself."""
    total = sum(_plaintext_bytes(size) for size in sizes)
    with subprocess.Popen([sys.executable, SINK, mode, str(port), certificate_pem, str(total)],
                          stdout=subprocess.PIPE, text=True) as sink:
        deadline = threading.Timer(SINK_TIMEOUT_S, sink.kill)  # a stuck sink ends its output
        deadline.start()
        try:
            if sink.stdout is None or sink.stdout.readline().strip() != "ready":
                raise RuntimeError(f"tls_sink {mode} did not start")
            with socket.create_connection(("127.0.0.1", port), timeout=SINK_TIMEOUT_S) as sock:
                wire = _plaintext_chunks(total) if mode == "plaintext" else _connected_records(sock, ca_pem, sizes)
                for chunk in wire:
                    sock.sendall(chunk)
                result = sink.stdout.readline().split()
        finally:
            deadline.cancel()
            sink.kill()
    if len(result) != 2:
        raise RuntimeError(f"tls_sink {mode} gave no result within {SINK_TIMEOUT_S:.0f} s")
    seconds, received = result
    if int(received) != total:
        raise RuntimeError(f"tls_sink {mode} received {received} of {total} bytes")
    return float(seconds)


def _plaintext_bytes(wire_size: int) -> int:
    return max(0, min(wire_size - HEADER_BYTES - TLS13_RECORD_OVERHEAD, MAX_PLAINTEXT))


def _plaintext_chunks(total: int) -> list[bytes]:
    whole, rest = divmod(total, 1 << 20)
    return [bytes(1 << 20)] * whole + [bytes(rest)]


def _connected_records(sock: socket.socket, ca_pem: str, sizes: list[int]) -> list[bytes]:
    """Handshake over `sock` with a memory-BIO client, then the records, encrypted, in chunks."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = _client_context(ca_pem).wrap_bio(incoming, outgoing)
    while True:
        try:
            client.do_handshake()
            break
        except ssl.SSLWantReadError:
            sock.sendall(outgoing.read())
            data = sock.recv(PUMP_BYTES)
            if not data:
                raise RuntimeError("tls_sink closed during the handshake") from None
            incoming.write(data)
    sock.sendall(outgoing.read())
    return _encrypt(client, outgoing, sizes)


def _client_context(ca_pem: str) -> ssl.SSLContext:
    """The bench's client side: trusts the test CA, connects by address (no host name check)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(ca_pem)
    context.check_hostname = False
    return context


def _handshake(client: ssl.SSLObject, server: ssl.SSLObject, client_in: ssl.MemoryBIO, client_out: ssl.MemoryBIO,
               server_in: ssl.MemoryBIO, server_out: ssl.MemoryBIO) -> None:
    for _ in range(10):
        for side in (client, server):
            with suppress(ssl.SSLWantReadError):
                side.do_handshake()
        server_in.write(client_out.read())
        client_in.write(server_out.read())
    if server.version() != "TLSv1.3":
        raise RuntimeError(f"handshake gave {server.version()}")


def _encrypt(client: ssl.SSLObject, client_out: ssl.MemoryBIO, sizes: list[int]) -> list[bytes]:
    """One record per size (a write of at most 16 KB is one record), in relay-sized chunks."""
    payload, chunks = bytes(MAX_PLAINTEXT), []
    for size in sizes:
        plaintext = _plaintext_bytes(size)
        if plaintext > 0:
            client.write(payload[:plaintext])
        if client_out.pending >= PUMP_BYTES:
            chunks.append(client_out.read())
    chunks.append(client_out.read())
    return chunks
