"""Share sessions (KIP-932): which partitions a share group member fetches from this broker.

A member opens its session with a ShareFetch at epoch 0 naming the partitions it fetches; each
later ShareFetch or ShareAcknowledge carries the next epoch (1, 2, ... wrapping to 1), names the
partitions it adds and those it forgets; epoch -1 closes the session (its acknowledgements still
apply). A session is keyed by (group id, member id): opening one again replaces it. Every
ShareFetch acquires from all the partitions of its session. A session belongs to the connection
that opened it: when that connection closes (the client died, or closed without ending its
session) the session is evicted and `on_evicted` told, as Kafka's ShareSessionCache does on a
disconnect (the member's acquired records are released then). Errors as Kafka's
ShareSessionCache: SHARE_SESSION_NOT_FOUND (no session for a non-zero epoch),
INVALID_SHARE_SESSION_EPOCH (not the next epoch) and SHARE_SESSION_LIMIT_REACHED
(`group.share.max.share.sessions` open).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from ..errors import KafkaApiError

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1

SessionPartition = tuple[uuid.UUID, int]  # topic id, partition index


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int = 1  # the epoch the next request must carry
    partitions: dict[SessionPartition, None] = field(default_factory=dict)  # in the order added
    connection: Hashable = None  # the connection that opened it

    def advance(self) -> None:
        self.epoch = 1 if self.epoch == MAX_EPOCH else self.epoch + 1


class ShareSessionCache:
    def __init__(self, max_sessions: int, on_evicted: Callable[[ShareSession], None] = lambda _session: None) -> None:
        self.max_sessions = max_sessions
        self.on_evicted = on_evicted
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._by_connection: dict[Hashable, dict[tuple[str, str], ShareSession]] = {}

    def open(self, group_id: str, member_id: str, partitions: Iterable[SessionPartition],
             connection: Hashable = None) -> ShareSession:
        """Epoch 0: a new session (replacing this member's earlier one)."""
        key = (group_id, member_id)
        if key not in self.sessions and len(self.sessions) >= self.max_sessions:
            raise KafkaApiError(ErrorCode.share_session_limit_reached,
                                "The share session cache is full.")
        previous = self.sessions.get(key)
        if previous is not None:
            self.close(previous)
        session = ShareSession(group_id, member_id, partitions=dict.fromkeys(partitions), connection=connection)
        self.sessions[key] = session
        self._by_connection.setdefault(connection, {})[key] = session
        return session

    def current(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """The member's session, when `epoch` is its next one (or FINAL_EPOCH)."""
        session = self.sessions.get((group_id, member_id))
        if session is None:
            raise KafkaApiError(ErrorCode.share_session_not_found,
                                f"Share session for member {member_id} of group {group_id} not found.")
        if epoch != FINAL_EPOCH and epoch != session.epoch:
            raise KafkaApiError(ErrorCode.invalid_share_session_epoch,
                                f"Share session epoch {epoch} is not the expected {session.epoch}.")
        return session

    def update(self, session: ShareSession, added: Iterable[SessionPartition],
               forgotten: Iterable[SessionPartition]) -> None:
        """An incremental request: its epoch is taken, its partitions join, the forgotten leave."""
        for key in forgotten:
            session.partitions.pop(key, None)
        for key in added:
            session.partitions.setdefault(key, None)
        session.advance()

    def close(self, session: ShareSession) -> None:
        key = (session.group_id, session.member_id)
        if self.sessions.get(key) is session:
            del self.sessions[key]
            opened_here = self._by_connection.get(session.connection, {})
            opened_here.pop(key, None)
            if not opened_here:
                self._by_connection.pop(session.connection, None)

    def disconnected(self, connection: Hashable) -> None:
        """A connection closed: the sessions it opened are evicted."""
        for session in list(self._by_connection.get(connection, {}).values()):
            self.close(session)
            self.on_evicted(session)
