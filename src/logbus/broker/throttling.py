"""Quota enforcement for one request, as Kafka's KafkaApis does it (KIP-13, KIP-124, KIP-219, KIP-599).

The server makes a `RequestMeter` for a request only while some client quota is configured
(`ClientQuotas.enabled`, one identity check): without quotas nothing here runs. After the handler,
`throttle_ms` records what the request used against the quotas that apply to its (user, client id)
and returns the throttle time: the largest of

- producer_byte_rate: a Produce request's size;
- consumer_byte_rate: a consumer's Fetch response size (a follower's is not a client's). A fetch
  that is throttled is answered empty and its bytes taken back, as Kafka answers it (the consumer
  fetches the same records again once its throttle time has passed);
- request_percentage: the time the handler ran on the event loop (its steps between awaits, the
  counterpart of Kafka's request handler thread time), not the time it waited;
- controller_mutation_rate: what CreateTopics, CreatePartitions and DeleteTopics recorded through
  `RequestContext.mutation_quota`.

The response carries the throttle time and the server stops reading from that connection for as
long (KIP-219); other connections are unaffected.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Coroutine, Generator
from datetime import timedelta
from typing import Any

from ..security.quotas import (
    CONSUMER_BYTE_RATE,
    NANOS_TO_PERCENTAGE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotas,
    MutationQuota,
)
from ..storage.segment import FileRegion
from .apis.fetch import replica_id
from .context import RequestContext

PRODUCE, FETCH = 0, 1
# Kafka's strict controller mutation quota (THROTTLING_QUOTA_EXCEEDED) starts at these versions
# of CreateTopics, DeleteTopics and CreatePartitions; earlier ones are throttled, never refused.
MUTATION_STRICT_SINCE = {19: 6, 20: 5, 37: 3}
# Cluster actions are exempt from request_percentage, as in Kafka: WriteTxnMarkers, AlterPartition.
EXEMPT_FROM_REQUEST_QUOTA = frozenset({27, 56})


class RequestMeter:
    """What one request used, and the throttle time it earns."""

    def __init__(self, quotas: ClientQuotas, user: str, client_id: str, api_key: int, api_version: int,
                 request_size: int) -> None:
        self.quotas = quotas
        self.user = user
        self.client_id = client_id
        self.api_key = api_key
        self.request_size = request_size
        self.handler_nanos = 0
        strict_since = MUTATION_STRICT_SINCE.get(api_key)
        self.mutation: MutationQuota | None = None if strict_since is None else \
            quotas.mutation(user, client_id, api_version >= strict_since)

    def times_handler(self, request: Any) -> bool:
        """Whether the handler's time counts against request_percentage."""
        return self.quotas.enabled(REQUEST_PERCENTAGE) and self.api_key not in EXEMPT_FROM_REQUEST_QUOTA \
            and not self._is_follower_fetch(request)

    async def timed(self, handler: Coroutine[Any, Any, Any]) -> Any:
        """Run `handler`, adding the time its steps run to `handler_nanos`."""
        return await _Timed(handler, self)

    def throttle_ms(self, request: Any, response_size: int) -> tuple[int, bool]:
        """(throttle time, whether the response must go out empty: a throttled consumer fetch)."""
        request_throttle = 0
        if self.handler_nanos:
            request_throttle = self.quotas.record(REQUEST_PERCENTAGE, self.user, self.client_id,
                                                  self.handler_nanos * NANOS_TO_PERCENTAGE)
        bandwidth_throttle = 0
        if self.api_key == PRODUCE:
            bandwidth_throttle = self.quotas.record(PRODUCER_BYTE_RATE, self.user, self.client_id, self.request_size)
        elif self.api_key == FETCH and not self._is_follower_fetch(request):
            bandwidth_throttle = self.quotas.record(CONSUMER_BYTE_RATE, self.user, self.client_id, response_size)
            if max(bandwidth_throttle, request_throttle) > 0:
                self.quotas.unrecord(CONSUMER_BYTE_RATE, self.user, self.client_id, response_size)
                return max(bandwidth_throttle, request_throttle), True
        mutation_throttle = self.mutation.throttle_ms() if self.mutation is not None else 0
        return max(request_throttle, bandwidth_throttle, mutation_throttle), False

    def _is_follower_fetch(self, request: Any) -> bool:
        return self.api_key == FETCH and replica_id(request) >= 0


class _Timed:
    """Awaitable running a coroutine step by step, timing each step (the awaits excluded)."""

    def __init__(self, coroutine: Coroutine[Any, Any, Any], meter: RequestMeter) -> None:
        self.coroutine = coroutine
        self.meter = meter

    def __await__(self) -> Generator[Any, Any, Any]:
        coroutine = self.coroutine
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            started = time.perf_counter_ns()
            try:
                yielded = coroutine.send(sent) if thrown is None else coroutine.throw(thrown)
            except StopIteration as finished:
                return finished.value
            finally:
                self.meter.handler_nanos += time.perf_counter_ns() - started
            try:
                sent, thrown = (yield yielded), None
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - passed on into the coroutine, cancellation too
                sent, thrown = None, exc


def record_mutation(ctx: RequestContext, partitions: int) -> None:
    """Count `partitions` created or deleted against the client's controller_mutation_rate; a
    strict quota with an empty bucket refuses with QuotaExceeded (THROTTLING_QUOTA_EXCEEDED:
    nothing changes)."""
    if ctx.mutation_quota is not None:
        ctx.mutation_quota.record(partitions)


def response_size(chunks: list[bytes | memoryview | FileRegion] | None) -> int:
    if not chunks:
        return 0
    return sum(chunk.size if isinstance(chunk, FileRegion) else len(chunk) for chunk in chunks)


def throttled_response(response: Any, throttle_ms: int, empty_fetch: bool) -> Any:
    """The response with its throttle time (a fetch: with no topics, as Kafka's throttled fetch)."""
    fields = {field.name for field in dataclasses.fields(response)}
    changes: dict[str, Any] = {}
    if "throttle_time" in fields:
        changes["throttle_time"] = timedelta(milliseconds=throttle_ms)
    if empty_fetch:
        changes["responses"] = ()
    return dataclasses.replace(response, **changes) if changes else response
