"""The data of many znodes in few requests: ZooKeeper's multiRead (3.6+), else pipelined gets.

A broker starting in a cluster reads the state znode of every partition before it listens (the
view it serves Metadata from). kazoo spends ~0.3 ms of CPU on each request it sends and answers,
so 10,000 pipelined gets took a broker 3-4 s of CPU (10 s on this shared machine) before it
listened. Kafka's Java client pipelines the same reads at a small fraction of that; here one
multiRead request carries up to `MULTI_READ_PATHS` of them (its answer well within
jute.maxbuffer), and its answer is decoded in one pass. A server without multiRead (before
ZooKeeper 3.6) answers UNIMPLEMENTED; the reads are then pipelined gets, as before.

`SerialDataWatch`: a per-topic data watch whose reads after a reconnection go one after the
other through one thread of its client, not one new thread per watch.
"""

from __future__ import annotations

import logging
import queue
import threading
import weakref
from collections import namedtuple
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import EXCEPTIONS, NoNodeError, UnimplementedError
from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.serialization import GetData, MultiHeader, int_struct, read_buffer, stat_struct
from kazoo.protocol.states import KazooState, ZnodeStat
from kazoo.recipe.watchers import DataWatch

log = logging.getLogger(__name__)

MULTI_READ_PATHS = 1000  # ~150 bytes of answer per partition state: ~150 KB per request
ERROR_TYPE = -1  # a MultiHeader's type for an operation that failed (its error code follows)

Read = tuple[bytes, ZnodeStat] | Exception  # the data and stat of one znode, or why not (NoNodeError...)


class MultiRead(namedtuple("MultiRead", "paths")):
    """ZooKeeper's multiRead request (opcode 22) of getData operations, in kazoo's request
    shape: the answer holds, per path, its data and stat or its own error (one missing znode
    does not fail the others, unlike a write multi)."""

    type = 22

    def serialize(self) -> bytearray:
        body = bytearray()
        for path in self.paths:
            body.extend(MultiHeader(GetData.type, False, -1).serialize())
            body.extend(GetData(path, None).serialize())
        body.extend(MultiHeader(-1, True, -1).serialize())
        return body

    @classmethod
    def deserialize(cls, raw: bytes, offset: int) -> list[Read]:
        results: list[Read] = []
        header, offset = MultiHeader.deserialize(raw, offset)
        while not header.done:
            if header.type == ERROR_TYPE:
                code = int_struct.unpack_from(raw, offset)[0]
                offset += int_struct.size
                results.append(EXCEPTIONS[code]())
            else:
                data, offset = read_buffer(raw, offset)
                results.append((data, ZnodeStat._make(stat_struct.unpack_from(raw, offset))))
                offset += stat_struct.size
            header, offset = MultiHeader.deserialize(raw, offset)
        return results


class ZnodeReader:
    """Reads many znodes' data with `client` (a KazooClient), on any thread but the loop."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.multi_read = True  # until the server says it has none

    def read(self, paths: list[str]) -> list[Read]:
        """Each path's (data, stat), or the exception reading it raised (NoNodeError...); a
        failure of the whole request (connection lost) is raised."""
        if self.multi_read:
            try:
                return [read for start in range(0, len(paths), MULTI_READ_PATHS)
                        for read in self._multi_read(paths[start:start + MULTI_READ_PATHS])]
            except UnimplementedError:
                log.info("ZooKeeper has no multiRead (before 3.6): reading znodes one request each")
                self.multi_read = False
        return self._pipelined(paths)

    def _multi_read(self, paths: list[str]) -> list[Read]:
        """kazoo has no multiRead: the request goes through its `_call` with the chroot prefixed,
        as its own `get_async` sends a GetData."""
        answer = self.client.handler.async_result()
        self.client._call(MultiRead([_prefix_root(self.client.chroot, path) for path in paths]), answer)
        return answer.get()

    def _pipelined(self, paths: list[str]) -> list[Read]:
        pending = [self.client.get_async(path) for path in paths]
        results: list[Read] = []
        for read in pending:
            try:
                results.append(read.get())
            except NoNodeError as exc:  # as a multiRead answers it; the caller decides
                results.append(exc)
        return results


_WATCH_READS: weakref.WeakKeyDictionary[KazooClient, queue.SimpleQueue[Callable[[], Any]]] = \
    weakref.WeakKeyDictionary()


class SerialDataWatch(DataWatch):
    """kazoo's DataWatch, but after a reconnection it reads its znode again (and sets its watch
    again) in its client's one watch-reading thread. kazoo's starts a thread per watch at every
    reconnection (`handler.spawn`): a broker of 100,000 partitions watching three znodes per
    topic started thousands at each, which left its ZooKeeper thread too little of the
    interpreter to keep the session alive, so it expired and reconnected again (20,000
    threads in one broker, issue 25)."""

    def _session_watcher(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            _watch_reads(self._client).put(self._get_data)


def _watch_reads(client: KazooClient) -> queue.SimpleQueue[Callable[[], Any]]:
    """The queue of `client`'s watch reads, and the daemon thread that runs them in turn (a
    daemon, as kazoo's own: a read retrying at exit must not hold the process)."""
    reads = _WATCH_READS.get(client)
    if reads is None:
        reads = _WATCH_READS[client] = queue.SimpleQueue()
        threading.Thread(target=_run_reads, args=(reads,), name="zk-watch-reads", daemon=True).start()
    return reads


def _run_reads(reads: queue.SimpleQueue[Callable[[], Any]]) -> None:
    while True:
        read = reads.get()
        try:
            read()
        except Exception:  # noqa: BLE001 - kazoo's spawned thread would die alone; this one goes on
            log.exception("reading a watched znode again after a reconnection")
