"""Incremental fetch sessions (KIP-227): the broker remembers what a fetcher asked for last.

A fetcher that opens a session (a full fetch with session epoch 0) gets a session id back; its
later fetches (epoch 1, 2, ...) name only the partitions whose fetch position changed, and those
to forget, and the answers name only the partitions with something new: records, or a moved
high watermark, last stable offset or log start offset, or an error. A follower of many
partitions, most of them idle, then sends and receives a few bytes per fetch instead of every
partition each time.

Kafka's rules, as its FetchManager and FetchSessionCache keep them:
- session id 0 with epoch -1 is a fetch without a session (all partitions both ways);
- session id 0 with epoch 0 asks for a session: a full fetch, answered with the new id (or 0
  when the cache is full and nothing may be evicted);
- a session id with epoch -1 closes that session and fetches fully without one;
- a session id with the next epoch is incremental; an unknown id answers
  FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH, topic names where the
  session began with topic ids (or the reverse) FETCH_SESSION_TOPIC_ID_ERROR, and the session
  is left as it was.

The cache holds at most `max.incremental.fetch.session.cache.slots` sessions. When it is full a
new session may take the place of the least recently used one that has been idle for
`EVICTION_IDLE_S`, or, for a follower's session (privileged, as in Kafka), of the least recently
used consumer session; otherwise the fetch goes on without a session. What a fetcher names is
hostile input kept beyond its request, so the sessions together also hold at most
`MAX_CACHED_PARTITIONS` partitions: a full fetch naming more gets no session, and an incremental
one that would grow past it ends its session (FETCH_SESSION_ID_NOT_FOUND: the fetcher starts over
with a full fetch, which goes on without a session).
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from ..errors import SessionError

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_IDLE_S = 120.0  # Kafka's minimum idle time before any session may be evicted
MAX_CACHED_PARTITIONS = 200_000  # all sessions together (~200 bytes each)
_MAX_EPOCH = 2**31 - 1
_MAX_ID = 2**31 - 1

PartitionKey = tuple[Any, int]  # (topic name, or topic id from v13, partition index)


@dataclass(slots=True)
class CachedPartition:
    """What the fetcher last asked for (`fetch`, a request FetchPartition) and what it was last told."""

    fetch: Any
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    served_turn: int = 0  # the session's `turn` when it last answered records (0: never)

    def tell(self, answer: Any, records_size: int) -> bool:
        """Remember what `answer` tells the fetcher; True when an incremental answer must name this
        partition (Kafka's CachedPartition.maybeUpdateResponseData)."""
        moved = (
            self.high_watermark != answer.high_watermark
            or self.last_stable_offset != answer.last_stable_offset
            or self.log_start_offset != answer.log_start_offset
        )
        self.high_watermark = answer.high_watermark
        self.last_stable_offset = answer.last_stable_offset
        self.log_start_offset = answer.log_start_offset
        diverging = getattr(answer, "diverging_epoch", None)
        return (moved or records_size > 0 or answer.error_code != ErrorCode.none
                or (diverging is not None and diverging.epoch >= 0)
                or getattr(answer, "preferred_read_replica", -1) >= 0)


@dataclass(slots=True)
class FetchSession:
    id: int
    privileged: bool  # a follower's
    uses_topic_ids: bool
    epoch: int  # the epoch its next fetch must carry
    last_used: float
    # request topic entry (name or id) and partitions, in the order the fetcher gave them
    topics: dict[Any, Any] = field(default_factory=dict)
    partitions: OrderedDict[PartitionKey, CachedPartition] = field(default_factory=OrderedDict)
    counts: dict[Any, int] = field(default_factory=dict)  # partitions per topic key (a topic left with none goes)
    changes: Any = None  # a follower's: the `delayed_fetch.ChangeWatch` on its partitions
    swept_at: float = float("-inf")  # when a fetch last handled every partition (follower sessions)
    turn: int = 0  # counts the partitions that answered records (their `served_turn`)

    def update(self, wanted: Iterable[tuple[Any, Any, list[Any]]], forgotten: Iterable[PartitionKey]) -> None:
        """Add or replace the partitions a fetch names, then drop the ones it forgets (Kafka's
        order); the work is proportional to what the fetch names, not to the session's size."""
        for topic, key, partitions in wanted:
            self.topics[key] = topic
            for fetch in partitions:
                cached = self.partitions.get((key, fetch.partition))
                if cached is None:
                    self.partitions[(key, fetch.partition)] = CachedPartition(fetch)
                    self.counts[key] = self.counts.get(key, 0) + 1
                else:
                    cached.fetch = fetch
        for partition_key in forgotten:
            if self.partitions.pop(partition_key, None) is not None:
                self._count_removed(partition_key[0])

    def _count_removed(self, key: Any) -> None:
        """A topic left without partitions is forgotten too."""
        self.counts[key] -= 1
        if not self.counts[key]:
            del self.counts[key]
            self.topics.pop(key, None)

    def wanted(self, only: Iterable[PartitionKey] | None = None) -> list[tuple[Any, Any, list[Any]]]:
        """Every partition of the session (or those of `only` in it) as (request topic, topic
        key, fetch partitions), in the session's order (`only`: those that answered records
        longest ago first, as the session's order puts them): a topic's partitions apart in it
        make two entries (as Kafka's answer)."""
        chosen = self.partitions.items() if only is None else sorted(
            ((key, self.partitions[key]) for key in only if key in self.partitions),
            key=lambda item: (item[1].served_turn, item[0]))
        runs: list[tuple[Any, Any, list[Any]]] = []
        for (key, _), cached in chosen:
            if not runs or runs[-1][1] != key:
                runs.append((self.topics[key], key, []))
            runs[-1][2].append(cached.fetch)
        return runs

    def served(self, key: PartitionKey) -> None:
        """The partition answered records: it goes to the end of the session, so that the next
        fetches read the others first (Kafka's IncrementalFetchContext: with a small max_bytes
        every partition gets its turn, not the first ones until they run dry)."""
        self.partitions.move_to_end(key)
        self.turn += 1
        self.partitions[key].served_turn = self.turn


class FetchSessionCache:
    """The broker's sessions, bounded by `slots`; `clock` in seconds (injectable for tests)."""

    def __init__(self, slots: int, clock: Callable[[], float], rng: random.Random | None = None,
                 max_partitions: int = MAX_CACHED_PARTITIONS) -> None:
        self.slots = slots
        self.max_partitions = max_partitions
        self.clock = clock
        self._rng = rng or random.SystemRandom()
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def remove(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def cached_partitions(self) -> int:
        return sum(len(session.partitions) for session in self._sessions.values())

    def incremental(self, session_id: int, epoch: int, uses_topic_ids: bool, wanted: list[tuple[Any, Any, list]],
                    forgotten: list[PartitionKey]) -> FetchSession:
        """The session an incremental fetch continues, updated with what it names and forgets and
        its epoch moved on; SessionError when there is none, or it would outgrow the cache."""
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionError(ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            raise SessionError(ErrorCode.invalid_fetch_session_epoch)
        if session.uses_topic_ids != uses_topic_ids:
            raise SessionError(ErrorCode.fetch_session_topic_id_error)
        session.epoch = 1 if epoch >= _MAX_EPOCH else epoch + 1
        size_before = len(session.partitions)
        session.update(wanted, forgotten)
        if len(session.partitions) > size_before and self.cached_partitions() > self.max_partitions:
            self.remove(session_id)
            raise SessionError(ErrorCode.fetch_session_id_not_found)
        self._touch(session)
        return session

    def maybe_create(self, privileged: bool, uses_topic_ids: bool,
                     wanted: list[tuple[Any, Any, list]]) -> FetchSession | None:
        """A new session (next epoch 1) of the partitions a full fetch names, if there is room or
        one may be evicted, else None."""
        size = sum(len(partitions) for _, _, partitions in wanted)
        if self.cached_partitions() + size > self.max_partitions:
            return None
        if len(self._sessions) >= self.slots and not self._evict_for(privileged):
            return None
        session_id = self._new_id()
        session = FetchSession(session_id, privileged, uses_topic_ids, 1, self.clock())
        session.update(wanted, ())
        self._sessions[session_id] = session
        return session

    def _touch(self, session: FetchSession) -> None:
        session.last_used = self.clock()
        self._sessions.move_to_end(session.id)

    def _evict_for(self, privileged: bool) -> bool:
        """Make room: the least recently used session idle long enough, or (for a follower) the
        least recently used consumer session."""
        if self.slots <= 0:
            return False
        oldest = next(iter(self._sessions.values()))
        if self.clock() - oldest.last_used >= EVICTION_IDLE_S:
            del self._sessions[oldest.id]
            return True
        if privileged:
            for session in self._sessions.values():
                if not session.privileged:
                    del self._sessions[session.id]
                    return True
        return False

    def _new_id(self) -> int:
        while True:
            candidate = self._rng.randint(1, _MAX_ID)
            if candidate not in self._sessions:
                return candidate
