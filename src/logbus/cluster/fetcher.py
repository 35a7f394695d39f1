"""Followers fetch from leaders: one `ReplicaFetcher` per (leader broker, fetcher index).

A fetcher keeps one connection to its leader and sends Fetch v12 (topics by name; KIP-320's
`last_fetched_epoch` and `diverging_epoch`) with this broker's id as `replica_id`, so the leader
reads up to its log end and records how far this follower has come. Fetched batches are checked
(framing, CRC; compacted batches hold fewer records than their offset range) and appended as
they are (`PartitionLog.append_as_follower`: offsets and leader epochs kept). When the leader
answers a `diverging_epoch`, this log holds batches the leader does not (it led, or followed an
old leader, and was cut off): it is truncated to where the epochs agree before fetching again, so
replicas never diverge silently.

Each fetcher keeps an incremental fetch session (KIP-227) with its leader: after a first full
fetch, a fetch names only the partitions whose position moved (and those to forget), and the
answer only the partitions with news, so idle partitions (most of `__consumer_offsets`) cost
nothing per fetch. A session error, a lost connection or a failed fetch start again with a full
fetch. The fetcher's own work per fetch is proportional to what changed, not to its partitions:
it looks again only at the partitions it was given or lost, those answered, and those whose
pause ended since the last fetch (`ReplicaFetcher._changed`); every `SWEEP_S` it compares each
one's log start with the one last sent (a log start moved by local retention is sent on).

Errors of one partition (NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH) park it until the
metadata moves; connection errors retry after `replica.fetch.backoff.ms`, logged once per streak.
The leader's bytes are network bytes like any other: the response frame is bounded in size, and
`protocol.replica_fetch` checks every length and count in it against the bytes there are. Its
requests and answers are written and read there field by field rather than by kio's generic
writers and readers (one request and one answer per replicated batch), records as views of
the frame, never copied before the append.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ..protocol.records import BatchHeader, validate_batches, whole_batches_length
from ..protocol.replica_fetch import (
    FetchAnswer,
    FetchedPartition,
    FetchPosition,
    MalformedAnswer,
    ReplicaFetch,
    decode_replica_fetch_response,
    encode_replica_fetch,
)
from ..security.listeners import ListenerEndpoint
from ..storage.log import FollowerAppendError
from .frame_stream import FrameStream, open_frame_stream
from .partition import Partition

if TYPE_CHECKING:
    from .sasl_login import InterBrokerLogin

log = logging.getLogger(__name__)

STOP_WAIT_S = 2.0  # a fetcher cancelled at shutdown gets this long to finish
NEW_STATE_RETRY_S = 0.05  # a leader that has not yet seen the leader epoch its follower already knows
SWEEP_S = 5.0  # an incremental fetch looks at the changed partitions only; this often also at log starts
_SESSION_ERRORS = {ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch,
                   ErrorCode.fetch_session_topic_id_error}
_MAX_SESSION_EPOCH = 2**31 - 1
_PARKING_ERRORS = {ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
                   ErrorCode.unknown_leader_epoch, ErrorCode.unknown_topic_or_partition,
                   ErrorCode.kafka_storage_error}  # the leader's log dir failed: a new leader comes


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    broker_id: int
    max_bytes: int  # replica.fetch.max.bytes (per partition)
    response_max_bytes: int  # replica.fetch.response.max.bytes
    wait_max_ms: int
    min_bytes: int
    backoff_ms: int
    socket_timeout_ms: int


class ReplicaFetcher:
    """Fetches the partitions this broker follows from one leader."""

    def __init__(self, config: FetcherConfig, leader_id: int, address: ListenerEndpoint, name: str,
                 tls: ssl.SSLContext | None = None, sasl: InterBrokerLogin | None = None) -> None:
        """`tls`: the context to connect with when `address` is an SSL listener; `sasl`: the login
        on a SASL listener."""
        self.config = config
        self.leader_id = leader_id
        self.address = address
        self.tls = tls
        self.sasl = sasl
        self.name = name
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stream: FrameStream | None = None
        self._correlation = 0
        self._failing = False
        self._delayed: dict[tuple[str, int], float] = {}  # partition -> loop time its fetching resumes
        self._session = FetcherSession()
        self._changed: set[tuple[str, int]] = set()  # position or fetchability may have moved since planned
        self._swept_at = float("-inf")  # loop time of the last plan that looked at every partition
        self._client_id = f"logbus-replica-fetcher-{config.broker_id}"

    def add(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        self.partitions[key] = partition
        self._delayed.pop(key, None)
        self._changed.add(key)
        self._wakeup.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    def remove(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        self.partitions.pop(key, None)
        self._delayed.pop(key, None)
        self._changed.add(key)

    async def stop(self) -> None:
        self._close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=STOP_WAIT_S)

    def reconnect(self) -> None:
        self._close()

    def _close(self) -> None:
        if self._stream is not None:
            self._stream.close()
        self._stream = None
        self._session.reset()

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            self._resume_delayed(now)
            named, forgotten = self._plan(now)
            if not self._session.sent and not forgotten:
                self._wakeup.clear()
                wait = min(self._delayed.values(), default=now + 3600) - now
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._wakeup.wait()
                continue
            reused = self._stream is not None
            try:
                response = await self._fetch(named, forgotten)
                if not self._session.answered(ErrorCode(response.error_code), response.session_id):
                    continue  # the leader no longer knows the session: a full fetch at once
                await self._handle(response)
                if self._failing:
                    log.info("%s: fetching from broker %d again", self.name, self.leader_id)
                    self._failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - every failure: reconnect after a pause
                if reused and isinstance(exc, ConnectionError):
                    # a connection from before the leader restarted: a new one at once, no pause
                    log.info("%s: connection to broker %d lost (%s); reconnecting", self.name, self.leader_id, exc)
                    self._close()
                    continue
                if not self._failing:
                    log.warning("%s: fetch from broker %d at %s:%d failed: %s (retrying every %d ms)", self.name,
                                self.leader_id, self.address.host, self.address.port, exc, self.config.backoff_ms)
                    self._failing = True
                self._close()
                await asyncio.sleep(self.config.backoff_ms / 1000)

    def _resume_delayed(self, now: float) -> None:
        """Partitions whose pause is over are fetched again."""
        resumed = [key for key, at in self._delayed.items() if at <= now]
        for key in resumed:
            del self._delayed[key]
        self._changed.update(resumed)

    def _plan(self, now: float) -> tuple[list[Partition], list[tuple[str, int]]]:
        """The partitions the next fetch names and the keys it forgets: of every partition in a
        full fetch, else of the changed ones only (at a sweep also those whose log start local
        retention moved: `FetcherSession.moved_log_starts`)."""
        if self._session.id == 0:
            self._swept_at = now
            self._changed.clear()
            keys, forgotten = self._session.plan({key: _position(p) for key, p in self.partitions.items()
                                                  if self._fetchable(key, p)})
        else:
            if now - self._swept_at >= SWEEP_S:
                self._swept_at = now
                self._changed.update(self._session.moved_log_starts(self.partitions))
            changed, self._changed = self._changed, set()
            keys, forgotten = self._session.plan_changed({key: self._position_if_fetchable(key) for key in changed})
        return [self.partitions[key] for key in keys], forgotten

    def _fetchable(self, key: tuple[str, int], partition: Partition) -> bool:
        return partition.is_follower and partition.state.leader == self.leader_id and key not in self._delayed

    def _position_if_fetchable(self, key: tuple[str, int]) -> tuple[int, ...] | None:
        partition = self.partitions.get(key)
        return _position(partition) if partition is not None and self._fetchable(key, partition) else None

    async def _fetch(self, named: list[Partition], forgotten: list[tuple[str, int]]) -> FetchAnswer:
        if self._stream is None:
            async with asyncio.timeout(self.config.socket_timeout_ms / 1000):
                stream = await open_frame_stream(self.address.host, self.address.port, self._max_response_frame(),
                                                 self.tls if self.address.tls else None)
                try:
                    if self.sasl is not None:
                        await self.sasl.authenticate(stream, self._client_id)
                except BaseException:
                    stream.close()
                    raise
                self._stream = stream
        self._correlation += 1
        self._stream.write(encode_replica_fetch(self._correlation, self._client_id, self._request(named, forgotten)))
        async with asyncio.timeout((self.config.socket_timeout_ms + self.config.wait_max_ms) / 1000):
            return await self._response()

    def _request(self, partitions: list[Partition], forgotten: list[tuple[str, int]]) -> ReplicaFetch:
        topics: dict[str, list[FetchPosition]] = {}
        for partition in partitions:
            partition_log = partition.log
            topics.setdefault(partition.topic, []).append(FetchPosition(
                partition.index, partition.leader_epoch, partition_log.log_end_offset, partition_log.latest_epoch(),
                partition_log.log_start_offset, self.config.max_bytes))
        forgotten_by_topic: dict[str, list[int]] = {}
        for topic, index in forgotten:
            forgotten_by_topic.setdefault(topic, []).append(index)
        return ReplicaFetch(self.config.broker_id, self.config.wait_max_ms, self.config.min_bytes,
                            self.config.response_max_bytes, self._session.id, self._session.epoch,
                            list(topics.items()), list(forgotten_by_topic.items()))

    async def _response(self) -> FetchAnswer:
        assert self._stream is not None
        return decode_fetch_response(await self._stream.read_frame(), self._correlation)

    def _max_response_frame(self) -> int:
        """The largest answer taken: the request's max bytes, and room for a first batch over it (KIP-74)."""
        return self.config.response_max_bytes + (1 << 20)

    # ------------------------------------------------------------------ answers

    async def _handle(self, response: FetchAnswer) -> None:
        """Each answered partition still followed from this leader; its position may move (it is
        looked at again in the next plan)."""
        for topic in response.responses:
            for answer in topic.partitions:
                key = (topic.topic, answer.partition_index)
                partition = self.partitions.get(key)
                if partition is not None and partition.is_follower and partition.state.leader == self.leader_id \
                        and not partition.offline:
                    self._changed.add(key)
                    await self._handle_partition(partition, answer)

    async def _handle_partition(self, partition: Partition, answer: FetchedPartition) -> None:
        error = ErrorCode(answer.error_code)
        if error == ErrorCode.offset_out_of_range:
            await self._out_of_range(partition, answer)
        elif error in _PARKING_ERRORS:
            # the leader has not seen the new state yet (it will within milliseconds: retry soon),
            # or it moved on (this broker's own state change re-adds the partition)
            pause = NEW_STATE_RETRY_S if error == ErrorCode.unknown_leader_epoch else self.config.backoff_ms / 1000
            self._delayed[(partition.topic, partition.index)] = asyncio.get_running_loop().time() + pause
            self._session.resend((partition.topic, partition.index))
        elif error != ErrorCode.none:  # retried after a pause, as Kafka's partitionsWithError
            log.warning("%s: %s from broker %d: %s", self.name, partition, self.leader_id, error.name)
            self._delayed[(partition.topic, partition.index)] = asyncio.get_running_loop().time() + \
                self.config.backoff_ms / 1000
        elif answer.diverging_epoch.epoch >= 0:
            await self._truncate_diverged(partition, answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset)
        else:
            await self._append(partition, answer)

    async def _append(self, partition: Partition, answer: FetchedPartition) -> None:
        data, headers = fetched_batches(answer.records or b"")
        if headers:
            if _starts_inside_first_batch(partition, headers[0]):
                await partition.truncate_fully_and_start_at(headers[0].base_offset)
            try:
                partition.append_as_follower(data, headers, answer.high_watermark)
            except (FollowerAppendError, OSError) as exc:  # an OSError took the log dir offline
                log.warning("%s: %s", self.name, exc)
                return
        else:
            partition.follow_high_watermark(answer.high_watermark)
        partition.follow_log_start_offset(answer.log_start_offset)

    async def _truncate_diverged(self, partition: Partition, epoch: int, end_offset: int) -> None:
        """KIP-320: the leader's log ends epoch `epoch` at `end_offset`; keep what agrees with it."""
        mine_epoch, mine_end = partition.log.end_offset_for_epoch(epoch)
        target = min(end_offset, mine_end) if mine_epoch == epoch else min(end_offset, max(mine_end, 0))
        if mine_epoch < 0:
            target = min(end_offset, partition.high_watermark)
        log.info("%s: %s diverges from broker %d at epoch %d; truncating %d -> %d", self.name, partition,
                 self.leader_id, epoch, partition.log.log_end_offset, target)
        await partition.truncate_to(target)

    async def _out_of_range(self, partition: Partition, answer: FetchedPartition) -> None:
        """Kafka's handleOutOfRangeError: past the leader's end -> truncate to it; before its log
        start -> start afresh at the leader's log start."""
        leo = partition.log.log_end_offset
        if answer.high_watermark >= 0 and leo > answer.high_watermark:
            await partition.truncate_to(answer.high_watermark)
        elif answer.log_start_offset > leo:
            await partition.truncate_fully_and_start_at(answer.log_start_offset)


def _starts_inside_first_batch(partition: Partition, first: BatchHeader) -> bool:
    """An empty log whose start falls inside the first batch fetched: the leader's log start
    (DeleteRecords) is in the middle of that batch, and the leader sends the whole batch. As
    Kafka's appendRecordsToFollowerOrFutureReplica, the log then starts at the batch's base
    offset (the leader's log start is followed right after); otherwise the batch could never
    be appended and the follower would stay out of the ISR for good."""
    log = partition.log
    return log.log_end_offset == log.log_start_offset and first.base_offset < log.log_end_offset <= first.last_offset


@dataclass(slots=True)
class FetcherSession:
    """A fetcher's side of its incremental fetch session: the session id (0: none yet, the next
    fetch is full and asks for one), the epoch the next fetch carries, and the position each
    partition was last sent with."""

    id: int = 0
    epoch: int = 0
    sent: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)

    def plan(self, positions: dict[tuple[str, int], tuple[int, ...]]) -> tuple[set[tuple[str, int]],
                                                                               list[tuple[str, int]]]:
        """Of the partitions to fetch (their positions), those the next fetch names (all in a full
        fetch, else the new ones and those whose position moved) and those it forgets."""
        if self.id == 0:
            named, forgotten = set(positions), []
        else:
            named = {key for key, position in positions.items() if self.sent.get(key) != position}
            forgotten = [key for key in self.sent if key not in positions]
        self.sent = positions
        return named, forgotten

    def plan_changed(self, changed: dict[tuple[str, int], tuple[int, ...] | None]) -> tuple[
            set[tuple[str, int]], list[tuple[str, int]]]:
        """`plan` for an incremental fetch, given only the partitions that may have changed (None:
        no longer fetched): those whose position moved are named, those sent before and no longer
        fetched are forgotten; the others stay in the session as they were."""
        named: set[tuple[str, int]] = set()
        forgotten: list[tuple[str, int]] = []
        for key, position in changed.items():
            if position is None:
                if self.sent.pop(key, None) is not None:
                    forgotten.append(key)
            elif self.sent.get(key) != position:
                self.sent[key] = position
                named.add(key)
        return named, forgotten

    def moved_log_starts(self, partitions: dict[tuple[str, int], Partition]) -> list[tuple[str, int]]:
        """The partitions sent whose log start is no longer the one sent: retention moved it (the
        log manager deletes segments, no fetch answer marks the partition changed). One number
        per partition is compared: an idle fetcher's sweep no longer computes every position."""
        return [key for key, position in self.sent.items()
                if (partition := partitions.get(key)) is not None and partition.log.log_start_offset != position[3]]

    def resend(self, key: tuple[str, int]) -> None:
        """Name the partition in the next fetch although its position did not move: it was
        answered with an error, and a leader that has taken it up since looks at a follower's
        quiet session partitions only every few seconds (fetch.py's SWEEP_S). A partition created
        on its follower before its leader had it waited that long, past replica.lag.time.max.ms."""
        self.sent.pop(key, None)

    def answered(self, error: ErrorCode, session_id: int) -> bool:
        """Move on with an answer's top-level error and session id: the new session of a full
        fetch, or the next epoch; False (and no session) when the leader refused the session,
        whose next fetch is then full."""
        if error in _SESSION_ERRORS:
            self.reset()
            return False
        if self.id == 0:
            self.id = session_id
            self.epoch = 1 if self.id else 0
        else:
            self.epoch = 1 if self.epoch >= _MAX_SESSION_EPOCH else self.epoch + 1
        return True

    def reset(self) -> None:
        self.id, self.epoch, self.sent = 0, 0, {}


def _position(partition: Partition) -> tuple[int, ...]:
    """What a fetch tells the leader about a partition; a change means naming it again."""
    log = partition.log
    return log.log_end_offset, partition.leader_epoch, log.latest_epoch(), log.log_start_offset


def decode_fetch_response(frame: bytes, correlation: int) -> FetchAnswer:
    """A leader's Fetch v12 response frame (`protocol.replica_fetch`: every length checked, the
    records views of the frame); ConnectionError (the fetcher reconnects) for anything that is
    not a well-formed answer to request `correlation`."""
    try:
        answer = decode_replica_fetch_response(frame)
    except MalformedAnswer as exc:
        raise ConnectionError(f"malformed fetch response: {exc}") from None
    if answer.correlation_id != correlation:
        raise ConnectionError(f"correlation id {answer.correlation_id}, expected {correlation}")
    if answer.error_code != ErrorCode.none:
        raise ConnectionError(f"fetch refused: {answer.error_code.name}")
    return answer


def fetched_batches(records: bytes | memoryview) -> tuple[memoryview, list[BatchHeader]]:
    """The whole batches of a fetched record set (a partial last batch is left for the next
    fetch), checked for framing and CRC (CorruptRecordError / KafkaApiError otherwise). A view,
    not a copy: a follower appends the leader's bytes as they are (compacted batches too)."""
    data = memoryview(records)[: whole_batches_length(records)]
    return data, validate_batches(data, cleaned=True) if data else []


class FetcherManager:
    """The fetchers of this broker: `num.replica.fetchers` per leader broker, partitions spread
    over them by hash. A partition whose leader has no known address waits for the next broker
    change."""

    def __init__(self, config: FetcherConfig, fetchers_per_broker: int,
                 address_of: Any, tls: ssl.SSLContext | None = None, sasl: InterBrokerLogin | None = None) -> None:
        self.config = config
        self.per_broker = fetchers_per_broker
        self.address_of = address_of  # broker id -> its inter-broker ListenerEndpoint | None
        self.tls = tls
        self.sasl = sasl
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._where: dict[tuple[str, int], tuple[int, int]] = {}
        self._waiting: dict[tuple[str, int], Partition] = {}

    def follow(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        self.unfollow(partition)
        address = self.address_of(partition.state.leader)
        if address is None:
            self._waiting[key] = partition
            return
        slot = (partition.state.leader, hash(key) % self.per_broker)
        fetcher = self.fetchers.get(slot)
        if fetcher is not None and fetcher.address != address:  # the leader came back elsewhere
            fetcher.address = address
            fetcher.reconnect()
        if fetcher is None:
            fetcher = self.fetchers[slot] = ReplicaFetcher(
                self.config, partition.state.leader, address, f"fetcher-{slot[0]}-{slot[1]}", self.tls,
                self.sasl)
        fetcher.add(partition)
        self._where[key] = slot

    def unfollow(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        self._waiting.pop(key, None)
        slot = self._where.pop(key, None)
        if slot is not None and (fetcher := self.fetchers.get(slot)) is not None:
            fetcher.remove(partition)

    def brokers_changed(self) -> None:
        for partition in list(self._waiting.values()):
            self.follow(partition)

    async def stop(self) -> None:
        await asyncio.gather(*(fetcher.stop() for fetcher in self.fetchers.values()))
        self.fetchers.clear()
