"""End to end: request frames through the server's dispatch (`KafkaConnection._respond`: header,
bounded pre-scan, decode, the API handler, response encoding) of a broker started in this process
in a temporary data dir. A refusal is MalformedRequestError (the server closes that connection);
a handler answers every other bad input with an error code in its response. The server answers a
handler's unexpected exception with UNKNOWN_SERVER_ERROR and logs its traceback: that logged
exception is re-raised here, an unmapped exception, as is any exception escaping the dispatch.
A handler still waiting after 0.2 s (a long poll, a join waiting for its group, a deferred
answer) is cancelled, as when a client disconnects.

The broker hosts at most 200 partitions (`max.partitions`), so mutated CreateTopics and
CreatePartitions counts (2^31 partitions) are refused instead of filling the disk.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import shutil
import tempfile
from typing import Any

from bench.fuzz.samples import sample_frame, served_versions
from logbus.broker.broker import Broker
from logbus.broker.server import KafkaConnection
from logbus.config import BrokerConfig
from logbus.protocol.frames import MalformedRequestError, peek_api
from logbus.security.listeners import ListenerSettings


class _LoggedFailures(logging.Handler):
    """Keeps the exceptions the server logs with their traceback (a handler's bug, answered)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.failures: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.failures.append(record.exc_info[1])


SEEDS = [sample_frame(api_key, version, width) for api_key, version in served_versions() for width in (0, 1)]
HANDLER_TIMEOUT_S = 0.2
_state: dict[str, Any] = {}


def _connection() -> tuple[asyncio.AbstractEventLoop, KafkaConnection]:
    """A broker and a connection object for it, made once per fuzzing process."""
    if not _state:
        logging.disable(logging.WARNING)  # refused requests are logged at warning; errors still show
        data_dir = tempfile.mkdtemp(prefix="logbus-fuzz-")
        loop = asyncio.new_event_loop()
        config = BrokerConfig({
            "group.initial.rebalance.delay.ms": "0", "log.segment.bytes": str(1 << 20), "max.partitions": "200",
            # ACLs on, the fuzzer a super user: CreateAcls/DeleteAcls/DescribeAcls parse what it sends
            "authorizer.class.name": "logbus", "super.users": "User:ANONYMOUS",
        })
        broker = Broker(config, 0, ListenerSettings.plaintext("127.0.0.1", 0), data_dir)
        (listener,) = loop.run_until_complete(broker.start())
        atexit.register(_stop, loop, broker, data_dir)
        connection = KafkaConnection(broker, listener)
        connection.client_host = "127.0.0.1"
        failures = _LoggedFailures()
        logging.getLogger("logbus.broker.server").addHandler(failures)
        _state.update(loop=loop, connection=connection, failures=failures)
    return _state["loop"], _state["connection"]


def _stop(loop: asyncio.AbstractEventLoop, broker: Broker, data_dir: str) -> None:
    loop.run_until_complete(broker.stop())
    shutil.rmtree(data_dir, ignore_errors=True)


async def _answer(connection: KafkaConnection, data: bytes) -> Any:
    """The response chunks, awaited when the handler deferred them (acks=all, WriteTxnMarkers)."""
    chunks = await connection._respond(data)
    return await chunks if isinstance(chunks, asyncio.Future) else chunks


def fuzz_one(data: bytes) -> None:
    loop, connection = _connection()
    try:
        peek_api(data)
        chunks = loop.run_until_complete(asyncio.wait_for(_answer(connection, data), HANDLER_TIMEOUT_S))
    except (MalformedRequestError, TimeoutError):
        return
    finally:
        _raise_logged_failure()
    for chunk in chunks or ():
        close = getattr(chunk, "close", None)
        if close is not None:
            close()


def _raise_logged_failure() -> None:
    failures = _state["failures"].failures
    if failures:
        first = failures[0]
        failures.clear()
        raise first
