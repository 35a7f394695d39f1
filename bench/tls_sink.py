"""A receiver that does nothing with what it receives: what taking bytes in costs a Python process.

    python bench/tls_sink.py MODE PORT CERTIFICATE_PEM PLAINTEXT_BYTES

MODE is `uvloop-tls` (uvloop's TLS transport into a BufferedProtocol, as the broker's listeners
receive), `memory-bio` (a plain uvloop transport, the TLS layer being a memory BIO and
`SSLObject.read` in a loop: the least Python-side work per record found), or `plaintext`. One
connection on 127.0.0.1:PORT; prints `ready` once listening, then the CPU seconds the process
spent from the first application byte to the last of PLAINTEXT_BYTES, and the bytes received.
Used by `bench/tls_records.receive_seconds`.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import time

import uvloop

READ_BYTES = 1 << 20


class Counter:
    """Counts application bytes and resolves `done` with the CPU seconds since the first one."""

    def __init__(self, total: int, done: asyncio.Future) -> None:
        self.total = total
        self.done = done
        self.received = 0
        self.started: float | None = None

    def add(self, count: int) -> None:
        if self.started is None:
            self.started = time.process_time()
        self.received += count
        if self.received >= self.total and not self.done.done():
            self.done.set_result(time.process_time() - self.started)


class Discard(asyncio.BufferedProtocol):
    """Application bytes into one reused buffer (the transport decrypts, if it is TLS)."""

    def __init__(self, counter: Counter) -> None:
        self.counter = counter
        self.buffer = memoryview(bytearray(READ_BYTES))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.counter.add(nbytes)


class MemoryBioDiscard(asyncio.BufferedProtocol):
    """Raw bytes from a plain transport into a memory BIO, then every record read out of it."""

    def __init__(self, counter: Counter, context: ssl.SSLContext) -> None:
        self.counter = counter
        self.raw = memoryview(bytearray(READ_BYTES))
        self.buffer = memoryview(bytearray(READ_BYTES))
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.handshaking = True
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.raw

    def buffer_updated(self, nbytes: int) -> None:
        self.incoming.write(self.raw[:nbytes])
        if self.handshaking:
            self._handshake()
        if not self.handshaking:
            self.counter.add(self._read_all())

    def _handshake(self) -> None:
        try:
            self.tls.do_handshake()
            self.handshaking = False
        except ssl.SSLWantReadError:
            pass
        assert self.transport is not None
        self.transport.write(self.outgoing.read())

    def _read_all(self) -> int:
        read, buffer, count = self.tls.read, self.buffer, 0
        try:
            while got := read(READ_BYTES, buffer):
                count += got
        except ssl.SSLWantReadError:
            pass
        return count


async def serve(mode: str, port: int, certificate_pem: str, total: int) -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()
    counter = Counter(total, done)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate_pem)
    if mode == "uvloop-tls":
        server = await loop.create_server(lambda: Discard(counter), "127.0.0.1", port, ssl=context)
    elif mode == "memory-bio":
        server = await loop.create_server(lambda: MemoryBioDiscard(counter, context), "127.0.0.1", port)
    elif mode == "plaintext":
        server = await loop.create_server(lambda: Discard(counter), "127.0.0.1", port)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print("ready", flush=True)
    seconds = await done
    print(f"{seconds:.6f} {counter.received}", flush=True)
    server.close()


if __name__ == "__main__":
    uvloop.run(serve(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
