"""Which exception means which Kafka error code: the one place that says so.

Every refusal that reaches a client is a `KafkaApiError` carrying its `ErrorCode` (and the
message the client is told). The refusals that have a name of their own are subclasses of it
defined here, each with its code, as Kafka's `Errors` enum pairs each code with an exception
class: storage, the cluster, the coordinators and security raise them, and a handler that
catches `KafkaApiError` puts `exc.code` and `exc.message` into its response for that topic,
partition, group or resource. Nothing translates one exception type into a code by hand.

A function with one outcome that refuses raises its named refusal rather than returning an
`ErrorCode` (`None` for "fine"); a handler catches `KafkaApiError` once and puts `exc.code` in
its response. Only per-item outcome maps (a code per partition or per member of one request, as
Kafka's `Map[TopicPartition, Errors]`) are values, and each value comes from a refusal:
`code_of(check)` where an item is checked (`code_of_awaited` where the check is awaited), or a
refusal class's `code`.

An API maps a code to another only where Kafka does for that API and version
(`producer_fenced_as`; a coordinator answering NOT_COORDINATOR where a producer gets
NOT_LEADER_OR_FOLLOWER).

Any other exception escaping a handler is a bug: `error_code_for` gives it UNKNOWN_SERVER_ERROR,
and the server answers that one request with it in every error code of the response, logs
one traceback, and keeps the connection (broker/server.py, protocol/error_response.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ClassVar

from kio.schema.errors import ErrorCode


class KafkaApiError(Exception):
    """A refusal with the error code and message the client gets."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message if message is not None else code.name)
        self.code = code
        self.message = message


def error_code_for(exc: BaseException) -> ErrorCode:
    """The code a request refused with `exc` is answered with: UNKNOWN_SERVER_ERROR for an
    exception that is not a refusal (a bug)."""
    if isinstance(exc, KafkaApiError):
        return exc.code
    return ErrorCode.unknown_server_error


def code_of(check: Callable[[], object]) -> ErrorCode:
    """One item's code in a per-item outcome map: NONE when `check` passes, else its refusal's.
    (Anything else it raises is a bug and escapes.)"""
    try:
        check()
    except KafkaApiError as exc:
        return exc.code
    return ErrorCode.none


async def code_of_awaited(check: Awaitable[object]) -> ErrorCode:
    """`code_of` for a check that is awaited (a write waiting for the ISR)."""
    try:
        await check
    except KafkaApiError as exc:
        return exc.code
    return ErrorCode.none


def producer_fenced_as(code: ErrorCode, version: int, fenced_from: int) -> ErrorCode:
    """PRODUCER_FENCED exists from version `fenced_from` of a transactional request (KIP-588);
    older versions get INVALID_PRODUCER_EPOCH, as Kafka answers them."""
    if code == ErrorCode.producer_fenced and version < fenced_from:
        return ErrorCode.invalid_producer_epoch
    return code


class _NamedRefusal(KafkaApiError):
    """A refusal whose class fixes its code."""

    code: ClassVar[ErrorCode]  # type: ignore[misc]

    def __init__(self, message: str | None = None) -> None:
        super().__init__(type(self).code, message)


class TxnError(KafkaApiError):
    """A request the transaction coordinator's state refuses, with the code it answers."""


class SessionError(KafkaApiError):
    """A fetch session that cannot serve the request (FETCH_SESSION_ID_NOT_FOUND & co.)."""


class MetadataWriteError(KafkaApiError):
    """The metadata store could not persist a change. KAFKA_STORAGE_ERROR by default (a full
    disk: nothing of it took effect); REQUEST_TIMED_OUT when the store is out of reach (ZooKeeper
    down) or the change did not show in time, as Kafka answers when its ZooKeeper client times out."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.kafka_storage_error) -> None:
        super().__init__(code, message)


class KafkaStorageError(_NamedRefusal):
    """A disk error (an OSError of a log) refused the request; its log dir went offline."""

    code = ErrorCode.kafka_storage_error


class OffsetOutOfRangeError(_NamedRefusal):
    code = ErrorCode.offset_out_of_range


class OutOfOrderSequenceError(_NamedRefusal):
    code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpochError(_NamedRefusal):
    code = ErrorCode.invalid_producer_epoch


class NotLeaderError(_NamedRefusal):
    code = ErrorCode.not_leader_or_follower


class NotEnoughReplicasError(_NamedRefusal):
    code = ErrorCode.not_enough_replicas


class NotEnoughReplicasAfterAppendError(_NamedRefusal):
    """acks=all: the records are in the leader's log, but the ISR shrank below min.insync.replicas."""

    code = ErrorCode.not_enough_replicas_after_append


class RequestTimedOutError(_NamedRefusal):
    """A wait (for the ISR, for the followers' log start) did not end in time (Kafka's TimeoutException)."""

    code = ErrorCode.request_timed_out


class LeaderNotAvailableError(_NamedRefusal):
    code = ErrorCode.leader_not_available


class NetworkError(_NamedRefusal):
    """The broker a request was forwarded to could not be reached (Kafka's NetworkException)."""

    code = ErrorCode.network_exception


class ReplicaNotAvailableError(_NamedRefusal):
    code = ErrorCode.replica_not_available


class LogDirNotFoundError(_NamedRefusal):
    code = ErrorCode.log_dir_not_found


class InvalidTxnStateError(_NamedRefusal):
    """A partition that is not in the producer's open transaction (KIP-890's verification)."""

    code = ErrorCode.invalid_txn_state


class UnknownServerError(_NamedRefusal):
    """A bug answered as one item's refusal, so that the rest of the request is still answered
    (a transaction marker listener that failed)."""

    code = ErrorCode.unknown_server_error


class TopicExistsError(_NamedRefusal):
    code = ErrorCode.topic_already_exists


class UnknownTopicError(_NamedRefusal):
    code = ErrorCode.unknown_topic_or_partition


class QuotaExceeded(_NamedRefusal):  # noqa: N818 - Kafka's name for it: ThrottlingQuotaExceededException
    """A strict controller mutation quota refused the request; `throttle_ms` is its throttle time."""

    code = ErrorCode.throttling_quota_exceeded

    def __init__(self, throttle_ms: int) -> None:
        super().__init__("The throttling quota has been exceeded.")
        self.throttle_ms = throttle_ms


class AuthenticationFailed(_NamedRefusal):  # noqa: N818 - Kafka's SaslAuthenticationException
    """The client did not authenticate; the message is what the client is told."""

    code = ErrorCode.sasl_authentication_failed


class ConfigError(_NamedRefusal, ValueError):
    """A config name or value that Kafka would reject (INVALID_CONFIG)."""

    code = ErrorCode.invalid_config


class InvalidAclError(_NamedRefusal, ValueError):
    """An ACL binding or filter Kafka refuses (INVALID_REQUEST)."""

    code = ErrorCode.invalid_request


class CorruptRecordError(_NamedRefusal, ValueError):
    """Record batches that do not decode (CORRUPT_MESSAGE)."""

    code = ErrorCode.corrupt_message


class UnsupportedSaslMechanismError(_NamedRefusal):
    """SaslHandshake named a mechanism the listener has not enabled."""

    code = ErrorCode.unsupported_sasl_mechanism


class IllegalSaslStateError(_NamedRefusal):
    """A SASL request out of turn: on a listener without SASL, after authentication, or a
    re-authentication Kafka refuses (KIP-368)."""

    code = ErrorCode.illegal_sasl_state


class TopicAuthorizationError(_NamedRefusal):
    code = ErrorCode.topic_authorization_failed


class GroupAuthorizationError(_NamedRefusal):
    code = ErrorCode.group_authorization_failed


class ClusterAuthorizationError(_NamedRefusal):
    code = ErrorCode.cluster_authorization_failed


class TransactionalIdAuthorizationError(_NamedRefusal):
    code = ErrorCode.transactional_id_authorization_failed


class SecurityDisabledError(_NamedRefusal):
    """An ACL request to a broker without an authorizer."""

    code = ErrorCode.security_disabled

    def __init__(self) -> None:
        super().__init__("No Authorizer is configured on the broker")


class CoordinatorNotAvailable(_NamedRefusal):  # noqa: N818 - Kafka's CoordinatorNotAvailableException
    """No coordinator state to serve the key from: its internal topic is missing, or the group died."""

    code = ErrorCode.coordinator_not_available


class NotCoordinator(_NamedRefusal):  # noqa: N818 - Kafka's NotCoordinatorException
    """This broker does not lead the internal-topic partition of the key."""

    code = ErrorCode.not_coordinator


class CoordinatorLoadInProgress(_NamedRefusal):  # noqa: N818 - Kafka's CoordinatorLoadInProgressException
    """This broker leads the key's partition but is still reading it."""

    code = ErrorCode.coordinator_load_in_progress


class InvalidGroupId(_NamedRefusal):  # noqa: N818 - Kafka's InvalidGroupIdException
    code = ErrorCode.invalid_group_id


class UnknownMemberId(_NamedRefusal):  # noqa: N818 - Kafka's UnknownMemberIdException
    code = ErrorCode.unknown_member_id


class IllegalGeneration(_NamedRefusal):  # noqa: N818 - Kafka's IllegalGenerationException
    code = ErrorCode.illegal_generation


class RebalanceInProgress(_NamedRefusal):  # noqa: N818 - Kafka's RebalanceInProgressException
    code = ErrorCode.rebalance_in_progress


class FencedInstanceId(_NamedRefusal):  # noqa: N818 - Kafka's FencedInstanceIdException
    code = ErrorCode.fenced_instance_id


class NonEmptyGroup(_NamedRefusal):  # noqa: N818 - Kafka's GroupNotEmptyException
    code = ErrorCode.non_empty_group


class GroupIdNotFound(_NamedRefusal):  # noqa: N818 - Kafka's GroupIdNotFoundException
    code = ErrorCode.group_id_not_found


class InvalidProducerIdMapping(_NamedRefusal):  # noqa: N818 - Kafka's InvalidPidMappingException
    code = ErrorCode.invalid_producer_id_mapping


class StaleMemberEpoch(_NamedRefusal):  # noqa: N818 - Kafka's StaleMemberEpochException
    code = ErrorCode.stale_member_epoch


class GroupSubscribedToTopic(_NamedRefusal):  # noqa: N818 - Kafka's GroupSubscribedToTopicException
    code = ErrorCode.group_subscribed_to_topic


class InconsistentGroupProtocol(_NamedRefusal):  # noqa: N818 - Kafka's InconsistentGroupProtocolException
    code = ErrorCode.inconsistent_group_protocol


class InvalidReplicaAssignment(_NamedRefusal):  # noqa: N818 - Kafka's InvalidReplicaAssignmentException
    code = ErrorCode.invalid_replica_assignment


class NoReassignmentInProgress(_NamedRefusal):  # noqa: N818 - Kafka's NoReassignmentInProgressException
    code = ErrorCode.no_reassignment_in_progress


class InvalidSessionTimeout(_NamedRefusal):  # noqa: N818 - Kafka's InvalidSessionTimeoutException
    code = ErrorCode.invalid_session_timeout


class GroupMaxSizeReached(_NamedRefusal):  # noqa: N818 - Kafka's GroupMaxSizeReachedException
    code = ErrorCode.group_max_size_reached
