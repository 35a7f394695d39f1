"""Fetch (key 1): serves v4–v18.

v13+ names topics by id. v7+ fetchers may open an incremental fetch session (KIP-227, see
`broker/fetch_sessions.py`): then each fetch names only the partitions whose position changed,
the broker reads every partition of the session that may have news (one with nothing to read and
no offset moved since the fetcher was last told is skipped unread), and answers with only those
that have news (fetchers without a session send and get every partition each time, as before). Each partition
answers from the batch holding the fetch offset (a fetch starting mid-batch gets the whole
batch; the client skips the records before its offset), up to `partition_max_bytes` and the
response's `max_bytes` (for a consumer under a consumer_byte_rate quota, at most what its quota
window holds, as Kafka bounds it), cut at whole batches. Only the first partition with records may
go past these limits, by its first batch (KIP-74: the fetcher always makes progress); a later
partition whose first batch does not fit in what is left answers no records, as Kafka's. Records
are one byte range per partition, sent as is: read into memory, or, on a connection that uses
sendfile (see the server) and from `SENDFILE_MIN_BYTES` up, put into the response as a FileRegion
that the server writes with `sendfile`, so the bytes never pass through Python. Records that
are not in the page cache (a lagging consumer reading a cold backlog) are read by a worker
thread through a descriptor of their own and sent from memory, so the event loop does not wait
on the disk for them. When fewer than `min_bytes` are ready the request waits up to `max_wait`;
as Kafka's DelayedFetch, it reads the partitions again only once the high watermarks moved and
the bytes appended since could make up `min_bytes` (or at the deadline), not on every append.

Every answer carries the partition's last stable offset (LSO: the HW, or the first offset of the
earliest transaction not yet stable), for consumers and followers alike, as Kafka's. A
read_committed consumer (isolation level 1) reads below the LSO and gets the aborted transactions
(producer id, first offset) its records may hold, found in the segments' `.txnindex` (see
`PartitionLog.aborted_transactions_in`); its fetch waits for the LSO to move rather than the HW.
Other readers get no aborted transactions (null), as from Kafka.

A consumer of v11+ may read from a follower (KIP-392): the leader names the replica its
`replica.selector.class` picks for the client's rack as `preferred_read_replica` (no records),
and a follower serves consumers up to its own high watermark (see docs/architecture.md, "Fetch
from follower"). A broker with no replica of a known partition answers NOT_LEADER_OR_FOLLOWER.

With an authorizer, as Kafka's KafkaApis: a consumer needs Read on each topic, a follower
ClusterAction on the cluster; refused partitions answer TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from kio.schema.errors import ErrorCode

from ...cluster.delayed_fetch import ChangeWatch, wait_for_fetchable
from ...cluster.partition import Partition
from ...cluster.replica_selector import ReplicaView
from ...errors import KafkaApiError, OffsetOutOfRangeError, SessionError
from ...metrics.counters import TopicTraffic
from ...protocol.codec import make, response_class, response_module
from ...protocol.records import whole_batches_length
from ...protocol.replica_fetch import FETCH_VERSION as REPLICA_FETCH_VERSION
from ...protocol.replica_fetch import encode_replica_fetch_response
from ...security.acl import AclOperation, ResourceType
from ...security.quotas import CONSUMER_BYTE_RATE
from ...storage.segment import FileRegion, ReadSlice
from ..authorization import authorize_cluster, authorized_names
from ..context import RawResponse, RequestContext
from ..fetch_sessions import FINAL_EPOCH, INITIAL_EPOCH, CachedPartition, FetchSession

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 18
READ_COMMITTED = 1  # the request's isolation level; 0 is read_uncommitted
TOPIC_ID_VERSION = 13  # from here topics are named by id
FOLLOWER_READ_VERSION = 11  # from here a consumer names its rack and may read from a follower (KIP-392)

# Below this a partition's records are read into memory: sendfile's extra system calls (and the
# wait for the socket buffer to drain before it) cost more than copying a few pages.
SENDFILE_MIN_BYTES = 64 * 1024
# A follower's incremental fetches handle what it names and what moved; at least this often one
# also looks for the moves no watch reports (`_unseen_moves`: a log start that retention moved).
SWEEP_S = 5.0


async def handle(ctx: RequestContext, request: Any) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait.total_seconds()
    try:
        session, incremental, entries = _session_of(ctx, request)
    except SessionError as exc:
        return make(response_class(API_KEY, ctx.api_version), error_code=exc.code, session_id=0, responses=(),
                    node_endpoints=())
    reader = _reader_of(ctx, request)
    watch = _change_watch(session, reader)
    narrowed = _narrowed(ctx, session, watch, request, incremental, loop.time())
    if entries is None:  # an incremental fetch that handles every partition of its session
        entries = session.wanted() if narrowed is None and session is not None else []
    while True:
        if narrowed is not None:  # a follower's partitions that moved since it was last answered
            narrowed |= watch.take()
            entries = session.wanted(narrowed)
        wanted = _resolved(ctx, entries)
        refused = _NOTHING_REFUSED if ctx.broker.authorizer is None else _refused_topics(ctx, request, wanted)
        await _load_uncached_read_starts(ctx, wanted)
        topics, total, partitions = _read_all(ctx, request, wanted, reader, refused, session if incremental else None,
                                              watch)
        if total >= request.min_bytes or deadline <= loop.time() or not (partitions or narrowed is not None) \
                or ctx.broker.stopping or _answer_now(topics):
            break
        _close_regions(topics)
        if watch is not None:
            if not _moved_unread(watch, narrowed):
                await watch.wait(deadline - loop.time())
        else:
            await wait_for_fetchable(partitions, request.min_bytes - total, deadline, reader.read_committed,
                                     follower=reader.follower, stopping=lambda: ctx.broker.stopping)
    topics = await _read_cold(ctx, topics)
    if ctx.broker.metrics is not None and replica_id(request) < 0:
        _count_bytes_out(ctx.broker.metrics.traffic, wanted, topics)
    if session is not None:
        topics = _session_answer(session, wanted, topics, incremental)
    response = make(
        response_class(API_KEY, ctx.api_version), error_code=ErrorCode.none,
        session_id=session.id if session is not None else 0, responses=topics, node_endpoints=(),
    )
    if reader.follower and ctx.api_version == REPLICA_FETCH_VERSION:  # a logbus follower's, never throttled
        return RawResponse(encode_replica_fetch_response(response))
    return response


@dataclasses.dataclass(frozen=True, slots=True)
class _Reader:
    """Who fetches: a follower (its broker id) or a consumer, and what a consumer may read."""

    replica: int  # the follower's broker id; -1 for a consumer
    read_committed: bool
    client_rack: str | None  # a consumer's rack (v11+: it may read from a follower); None: the leader only

    @property
    def follower(self) -> bool:
        return self.replica >= 0


def _reader_of(ctx: RequestContext, request: Any) -> _Reader:
    replica = replica_id(request)
    if replica >= 0:
        return _Reader(replica, False, None)
    client_rack = request.rack_id if ctx.api_version >= FOLLOWER_READ_VERSION else None
    return _Reader(replica, request.isolation_level == READ_COMMITTED, client_rack)


def _session_of(ctx: RequestContext, request: Any) -> tuple[FetchSession | None, bool,
                                                           list[tuple[Any, Any, list]] | None]:
    """The fetch session this fetch opens or continues (None: none), whether it is incremental,
    and the partitions to read: those a full fetch names; None for an incremental fetch (its
    session's partitions, all of them or those `_narrowed` picks, are listed only once known: a
    follower's session of thousands is not listed whole on every fetch). SessionError for an
    unknown session or a wrong epoch (see fetch_sessions)."""
    session_id, epoch = getattr(request, "session_id", 0), getattr(request, "session_epoch", FINAL_EPOCH)
    cache = ctx.broker.fetch_sessions
    uses_topic_ids = ctx.api_version >= TOPIC_ID_VERSION
    named = _request_entries(request)
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch; an earlier session of this fetcher ends
        if session_id:
            cache.remove(session_id)
        if epoch == FINAL_EPOCH:
            return None, False, named
        return cache.maybe_create(replica_id(request) >= 0, uses_topic_ids, named), False, named
    session = cache.incremental(session_id, epoch, uses_topic_ids, named, _forgotten(request))
    return session, True, None


def _request_entries(request: Any) -> list[tuple[Any, Any, list[Any]]]:
    """(request topic, its key: the name, or the id from v13, its partitions) per topic."""
    return [(topic, _topic_key(topic), list(topic.partitions)) for topic in request.topics]


def _topic_key(topic: Any) -> Any:
    name = getattr(topic, "topic", None)
    return name if name is not None else topic.topic_id


def _forgotten(request: Any) -> list[tuple[Any, int]]:
    return [(_topic_key(topic), index) for topic in getattr(request, "forgotten_topics_data", ())
            for index in topic.partitions]


def _change_watch(session: FetchSession | None, reader: _Reader) -> ChangeWatch | None:
    """A follower's session keeps a watch on its partitions (see `_narrowed`)."""
    if session is None or not reader.follower:
        return None
    if session.changes is None:
        session.changes = ChangeWatch()
    return session.changes


def _narrowed(ctx: RequestContext, session: FetchSession | None, watch: ChangeWatch | None, request: Any,
              incremental: bool, now: float) -> set[tuple[Any, int]] | None:
    """The partitions a follower's incremental fetch handles: those it names; the others of its
    session join as they move (`ChangeWatch`), and are not even looked at otherwise, so a fetch
    costs what moved, not the session's size (a caught-up follower stays caught up on the
    others: `FollowerState.caught_up_at`). At least every `SWEEP_S` those the watch cannot see
    join too (`_unseen_moves`). None: every partition, in a full fetch."""
    if session is None or watch is None:
        return None
    watch.fetched_at = time.monotonic()
    if not incremental:
        session.swept_at = now
        watch.forget_all()
        watch.take()
        return None
    named = {(key, fetch.partition) for _, key, partitions in _request_entries(request) for fetch in partitions}
    if now - session.swept_at >= SWEEP_S:
        session.swept_at = now
        named |= _unseen_moves(ctx, session, watch, replica_id(request))
    return named


def _unseen_moves(ctx: RequestContext, session: FetchSession, watch: ChangeWatch,
                  follower: int) -> set[tuple[Any, int]]:
    """A sweep of a follower's session: its partitions whose news no watch reported: a log start
    that retention moved (segments are deleted by the log manager, not through the partition),
    records the follower still lacks (a safety net: a read cut by the answer's size is marked
    changed in `_read_all`), a partition whose ISR lacks the follower (its expansion, decided
    when the follower's fetch is handled, failed to be written: ZooKeeper was out of reach),
    and a partition replaced since it was watched (a topic created again) or no longer hosted.
    Compares a few numbers per partition and reads none: an idle session of thousands costs
    little (reading each of them every sweep was most of an idle broker's CPU, issue 25). The
    watch forgets the replaced partitions; those handled now are watched again as they are read."""
    replicas = ctx.broker.replicas
    names = {key: _topic_name(ctx, topic) for key, topic in session.topics.items()}
    unseen: set[tuple[Any, int]] = set()
    watched: dict[Partition, Any] = {}
    for partition_key, cached in session.partitions.items():
        name = names.get(partition_key[0])
        partition = replicas.get(name, partition_key[1]) if name is not None else None
        if partition is None or watch.keys.get(partition) != partition_key:
            unseen.add(partition_key)
            continue
        watched[partition] = partition_key
        if cached.log_start_offset != partition.log.log_start_offset \
                or cached.fetch.fetch_offset < partition.log.log_end_offset or follower not in partition.state.isr:
            unseen.add(partition_key)
    watch.keys = watched
    return unseen


def _moved_unread(watch: ChangeWatch, narrowed: set[tuple[Any, int]] | None) -> bool:
    """After a read: take the partitions that moved meanwhile, so that only later moves end the
    wait (as Kafka's DelayedFetch, which compares with what it saw after the read). One read in
    it (the fetch's own follower update moved its HW) joins the next read; True when one was
    not read (it moved while the read starts were loaded): the fetch reads again at once."""
    moved = watch.take()
    if narrowed is None:  # a sweep read every partition of the session
        return False
    unread = not moved <= narrowed
    narrowed |= moved
    return unread


def _session_answer(session: FetchSession, wanted: list, topics: tuple, incremental: bool) -> tuple:
    """The session remembers what each partition's answer tells; an incremental answer keeps only
    the partitions with news (records, a moved offset, an error), and the topics left with any.
    A partition with records in an incremental answer is read last next time (`served`)."""
    kept = []
    for (topic_entry, _, _), topic in zip(wanted, topics, strict=True):
        key = _topic_key(topic_entry)
        answers = []
        for answer in topic.partitions:
            cached = session.partitions[(key, answer.partition_index)]
            size = _records_size(answer.records)
            if cached.tell(answer, size) or not incremental:
                answers.append(answer)
            if incremental and size:
                session.served((key, answer.partition_index))
        if answers:
            kept.append(dataclasses.replace(topic, partitions=tuple(answers)))
    return tuple(kept)


def _answer_now(topics: tuple) -> bool:
    """As Kafka's fetchMessages: an answer with an error, a diverging epoch or a preferred read
    replica goes out at once, whatever `min_bytes` asks."""
    return any(
        answer.error_code != ErrorCode.none or getattr(answer, "preferred_read_replica", -1) >= 0
        or ((diverging := getattr(answer, "diverging_epoch", None)) is not None and diverging.epoch >= 0)
        for topic in topics for answer in topic.partitions
    )


def _records_size(records: Any) -> int:
    if isinstance(records, FileRegion):
        return records.size
    return len(records or b"")


_NOTHING_REFUSED: frozenset[str] = frozenset()
_FOLLOWER_FETCH = ("FetchFollower", "Fetch")
_CONSUMER_FETCH = ("FetchConsumer", "Fetch")


def metric_names(request: Any) -> tuple[str, ...]:
    """As Kafka's request metrics: a fetch counts as Fetch and as FetchFollower or FetchConsumer."""
    return _FOLLOWER_FETCH if replica_id(request) >= 0 else _CONSUMER_FETCH


def _count_bytes_out(traffic: TopicTraffic, wanted: list, topics: tuple) -> None:
    """BytesOut as Kafka counts it: the record bytes of each topic in a consumer's answer."""
    for (_, name, _), topic in zip(wanted, topics, strict=True):
        size = sum(_records_size(answer.records) for answer in topic.partitions)
        if size and name is not None:
            traffic.fetched(name, size)


def _refused_topics(ctx: RequestContext, request: Any, wanted: list) -> set[str]:
    """The topics the fetcher may not read: all of them for a follower without ClusterAction."""
    names = {name for _, name, _ in wanted if name is not None}
    if replica_id(request) >= 0:
        return set() if authorize_cluster(ctx, AclOperation.CLUSTER_ACTION) else names
    return names - authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, names)


def _resolved(ctx: RequestContext, entries: list[tuple[Any, Any, list[Any]]]) -> list[tuple[Any, str | None, list]]:
    """(request topic, resolved name, its partitions), in the order given."""
    return [(topic, _topic_name(ctx, topic), partitions) for topic, _, partitions in entries]


def _topic_name(ctx: RequestContext, topic: Any) -> str | None:
    """A request topic's name: as given, or (v13+) that of its topic id; None for an unknown id."""
    name = getattr(topic, "topic", None)
    if name is None:
        metadata = ctx.broker.metadata.topic_by_id(str(topic.topic_id))
        name = metadata.name if metadata else None
    return name


async def _load_uncached_read_starts(ctx: RequestContext, wanted: list) -> None:
    """Bring into the page cache, in worker threads, where the partitions' reads will begin
    (the batch headers scanned to find each fetch offset) when that is not cached yet."""
    uncached = []
    for _, name, partitions in wanted:
        for fetch in partitions:
            partition = ctx.broker.replicas.get(name, fetch.partition) if name else None
            if partition is not None and not partition.recently_written(fetch.fetch_offset) and \
                    (region := partition.log.uncached_read_start(fetch.fetch_offset)):
                uncached.append(region)
    if uncached:
        await asyncio.gather(*(ctx.broker.logs.run_blocking(_load_region, region) for region in uncached))


def _read_all(
    ctx: RequestContext, request: Any, wanted: list, reader: _Reader, refused: frozenset[str] | set[str],
    session: FetchSession | None = None, watch: ChangeWatch | None = None,
) -> tuple[tuple, int, list[tuple[Partition, int]]]:
    """The answer per topic, the bytes in it, and each hosted partition with its max bytes
    (each also watched by `watch`, a follower session's).

    For an incremental `session` a partition with nothing new for its fetcher is left out before
    it is read (see `_quiet`), as its answer would be dropped anyway.
    """
    module = response_module(API_KEY, ctx.api_version)
    budget = _quota_bounded_max_bytes(ctx, request)
    total = 0
    hosted: list[tuple[Partition, int]] = []
    topics = []
    for topic, name, partitions in wanted:
        answers = []
        for fetch in partitions:
            if name in refused:
                answers.append(_answer(module, fetch.partition, ErrorCode.topic_authorization_failed))
                continue
            partition = ctx.broker.replicas.get(name, fetch.partition) if name else None
            if partition is not None:
                hosted.append((partition, fetch.partition_max_bytes))
                if watch is not None:
                    watch.watch(partition, (_topic_key(topic), fetch.partition))
            cached = session.partitions.get((_topic_key(topic), fetch.partition)) if session else None
            answer, size = _read_partition(module, ctx, name, fetch, budget, reader,
                                           min_one_batch=total == 0, cached=cached, watch=watch)
            if budget == 0 and total > 0 and watch is not None and partition is not None:
                watch.changed(partition)  # cut by the answer's size: the next fetch reads it
            if answer is None:
                continue
            budget = max(budget - size, 0)
            total += size
            answers.append(answer)
        topics.append(
            make(module.FetchableTopicResponse, topic=getattr(topic, "topic", None),
                 topic_id=getattr(topic, "topic_id", None), partitions=tuple(answers))
        )
    return tuple(topics), total, hosted


def _quota_bounded_max_bytes(ctx: RequestContext, request: Any) -> int:
    """The request's max bytes, for a consumer under a consumer_byte_rate quota no more than its
    quota window holds (Kafka's getMaxValueInQuotaWindow): a larger answer could never pass the
    quota, and would be throttled and answered empty again and again."""
    if replica_id(request) >= 0:
        return request.max_bytes
    bound = ctx.broker.quotas.max_value_in_window(CONSUMER_BYTE_RATE, ctx.principal.name, ctx.client_id or "")
    return request.max_bytes if bound is None else min(request.max_bytes, int(bound))


def _read_partition(
    module: Any, ctx: RequestContext, name: str | None, fetch: Any, budget: int, reader: _Reader,
    min_one_batch: bool, cached: CachedPartition | None = None, watch: ChangeWatch | None = None,
) -> tuple[Any, int]:
    """The partition's answer and its record bytes; (None, 0) when `cached` says the fetcher has
    been told everything there is (an incremental session's quiet partition).

    The read is bounded by min(`partition_max_bytes`, `budget`, what the response may still
    hold). Only the first partition with records (`min_one_batch`: none before it had any) gets
    its first batch even when that is larger, so that the fetcher always makes progress; a later
    one whose first batch does not fit answers no records (Kafka's ReplicaManager.readFromLog).
    """
    if name is None:
        return _answer(module, fetch.partition, ErrorCode.unknown_topic_id), 0
    try:  # a consumer with a rack (v11+) may read from a follower (KIP-392)
        partition = ctx.broker.replicas.partition_to_read(name, fetch.partition,
                                                          getattr(fetch, "current_leader_epoch", -1),  # v9+
                                                          leader_only=reader.client_rack is None)
    except KafkaApiError as exc:
        return _answer(module, fetch.partition, exc.code), 0
    if reader.follower:
        if reader.replica not in partition.state.replicas:
            return _answer(module, fetch.partition, ErrorCode.not_leader_or_follower), 0
        diverging = _diverging_epoch(partition, fetch)
        if diverging is not None:
            return _answer(module, fetch.partition, ErrorCode.none, partition.high_watermark,
                           partition.last_stable_offset, partition.log.log_start_offset, diverging=diverging), 0
        partition.update_follower(reader.replica, fetch.fetch_offset, getattr(fetch, "log_start_offset", -1),
                                  watch)
    elif (preferred := _preferred_read_replica(ctx, partition, fetch.fetch_offset, reader.client_rack)) is not None:
        return _answer(module, fetch.partition, ErrorCode.none, partition.high_watermark, partition.last_stable_offset,
                       partition.log.log_start_offset, preferred_read_replica=preferred), 0
    if cached is not None and _quiet(cached, partition, fetch.fetch_offset, reader.follower, reader.read_committed):
        return None, 0
    max_bytes = min(fetch.partition_max_bytes, budget)
    try:
        data = partition.read(fetch.fetch_offset, max_bytes, committed_only=not reader.follower,
                              read_committed=reader.read_committed, min_one_batch=min_one_batch)
    except OffsetOutOfRangeError as exc:  # answered with the offsets the consumer resets from
        return _answer(
            module, fetch.partition, exc.code, partition.high_watermark,
            partition.last_stable_offset, partition.log.log_start_offset,
        ), 0
    records: bytes | memoryview | FileRegion | _ColdRecords = b""
    if data.slice is not None:
        records = _records(data.slice, ctx.sendfile, partition.recently_written(fetch.fetch_offset))
    return _answer(
        module, fetch.partition, ErrorCode.none, data.high_watermark, data.last_stable_offset,
        data.log_start_offset, records, aborted=data.aborted_transactions,
    ), len(records)


def _preferred_read_replica(ctx: RequestContext, partition: Partition, fetch_offset: int,
                            client_rack: str | None) -> int | None:
    """KIP-392, on the leader: the replica `replica.selector.class` sends this consumer to, when
    that is not the leader itself (Kafka's findPreferredReadReplica); None: the leader serves.
    Only a replica the consumer can reach (one with an endpoint on its listener) is named."""
    selector = ctx.broker.replica_selector
    if selector is None or client_rack is None or not partition.is_leader:
        return None
    brokers = {b.broker_id: b for b in ctx.broker.metadata.brokers()}
    rack = {broker_id: info.rack for broker_id, info in brokers.items()}
    leader = ReplicaView(partition.broker_id, rack.get(partition.broker_id), partition.log.log_end_offset, 0.0)
    followers = [ReplicaView(broker_id, rack.get(broker_id), end, lag)
                 for broker_id, end, lag in partition.read_replica_candidates(fetch_offset)]
    selected = selector(client_rack, leader, [leader, *followers])
    if selected is leader or (info := brokers.get(selected.broker_id)) is None or \
            info.endpoint(ctx.listener_name) is None:
        return None
    return selected.broker_id


def _quiet(cached: CachedPartition, partition: Partition, offset: int, follower: bool, read_committed: bool) -> bool:
    """Nothing to read from `offset` (and no error to answer), and the HW, LSO and log start are
    what the fetcher was last told: a follower session's many idle partitions are skipped without
    a read or an answer built only to be dropped."""
    log, high_watermark = partition.log, partition.high_watermark
    stable = partition.last_stable_offset
    readable_end = log.log_end_offset if follower else stable if read_committed else high_watermark
    return (
        readable_end <= offset <= log.log_end_offset and offset >= log.log_start_offset
        and cached.high_watermark == high_watermark and cached.last_stable_offset == stable
        and cached.log_start_offset == log.log_start_offset
    )


class _ColdRecords:
    """Records not in the page cache, read later by a worker thread (`_read_cold`) and sent
    from memory."""

    __slots__ = ("region",)

    def __init__(self, region: FileRegion) -> None:
        self.region = region

    def __len__(self) -> int:
        return self.region.size  # an upper bound: cut to whole batches once read

    def close(self) -> None:
        self.region.close()


def _records(found: ReadSlice, sendfile: bool, recent: bool) -> memoryview | FileRegion | _ColdRecords:
    """Whole batches of `found`: a region for sendfile when allowed and large, else in memory;
    left for a worker thread when reading them would wait for the disk (not asked for `recent`
    bytes: `Partition.recently_written`)."""
    if not recent and not found.in_page_cache():
        return _ColdRecords(found.region())
    if not sendfile or found.size < SENDFILE_MIN_BYTES:
        raw = found.read()
        return memoryview(raw)[: whole_batches_length(raw)]
    return found.whole_batches().region()


def _close_regions(topics: tuple) -> None:
    """Release the file regions of an answer that will not be sent (the fetch waits instead)."""
    for topic in topics:
        for answer in topic.partitions:
            if isinstance(answer.records, FileRegion | _ColdRecords):
                answer.records.close()


async def _read_cold(ctx: RequestContext, topics: tuple) -> tuple:
    """The answer with every `_ColdRecords` read (in worker threads, in parallel) and cut to whole batches."""
    cold = [answer.records for topic in topics for answer in topic.partitions
            if isinstance(answer.records, _ColdRecords)]
    if not cold:
        return topics
    read = await asyncio.gather(*(ctx.broker.logs.run_blocking(_read_cold_records, c) for c in cold))
    loaded = dict(zip(map(id, cold), read, strict=True))
    return tuple(
        dataclasses.replace(topic, partitions=tuple(
            dataclasses.replace(answer, records=loaded[id(answer.records)])
            if isinstance(answer.records, _ColdRecords) else answer
            for answer in topic.partitions
        ))
        for topic in topics
    )


def _read_cold_records(cold: _ColdRecords) -> memoryview:
    """Worker thread: the records, cut to whole batches."""
    try:
        raw = cold.region.read()
    finally:
        cold.region.close()
    return memoryview(raw)[: whole_batches_length(raw)]


def _load_region(region: FileRegion) -> None:
    """Worker thread: bring a region's bytes into the page cache."""
    try:
        region.read()
    finally:
        region.close()


def replica_id(request: Any) -> int:
    """The fetching follower's broker id (v15+ in replica_state), -1 for a consumer."""
    state = getattr(request, "replica_state", None)
    if state is not None:
        return state.replica_id
    return getattr(request, "replica_id", -1)


def _diverging_epoch(partition: Partition, fetch: Any) -> tuple[int, int] | None:
    """KIP-320: (epoch, end offset) when the follower's last fetched epoch ends, on this leader,
    before its fetch offset (its log holds batches this one does not); None when they agree."""
    last_epoch = getattr(fetch, "last_fetched_epoch", -1)
    if last_epoch < 0:
        return None
    epoch, end_offset = partition.log.end_offset_for_epoch(last_epoch)
    if epoch < last_epoch or end_offset < fetch.fetch_offset:
        return epoch, end_offset
    return None


def _answer(
    module: Any, index: int, error: ErrorCode, high_watermark: int = -1, last_stable: int = -1,
    log_start: int = -1, records: bytes | memoryview | FileRegion | _ColdRecords = b"",
    diverging: tuple[int, int] | None = None, aborted: list[tuple[int, int]] | None = None,
    preferred_read_replica: int = -1,
) -> Any:
    extra = {}
    if diverging is not None and hasattr(module, "EpochEndOffset"):
        extra["diverging_epoch"] = module.EpochEndOffset(epoch=diverging[0], end_offset=diverging[1])
    return make(
        module.PartitionData, partition_index=index, error_code=error,
        high_watermark=high_watermark, last_stable_offset=last_stable,
        log_start_offset=log_start, aborted_transactions=_aborted(module, aborted),
        preferred_read_replica=preferred_read_replica, records=records, **extra,
    )


def _aborted(module: Any, aborted: list[tuple[int, int]] | None) -> tuple | None:
    if aborted is None:
        return None
    return tuple(module.AbortedTransaction(producer_id=pid, first_offset=first) for pid, first in aborted)
