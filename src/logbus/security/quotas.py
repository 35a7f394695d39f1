"""Client quotas as Kafka has them (sans-I/O; the clock is passed in, in milliseconds).

Entities (KIP-55): a user, a client id, or a (user, client id) pair, each name possibly Kafka's
`<default>`. For one quota type, a connection's quota is the first entity configured with that
type, in Kafka's precedence order (ClientQuotaManager, DefaultQuotaCallback):

    1. /config/users/<user>/clients/<client-id>   5. /config/users/<default>/clients/<default>
    2. /config/users/<user>/clients/<default>     6. /config/users/<default>
    3. /config/users/<user>                       7. /config/clients/<client-id>
    4. /config/users/<default>/clients/<client-id> 8. /config/clients/<default>

The usage a quota is measured on is shared by everyone the entity names: a quota on
/config/users/alice counts all of alice's connections whatever their client id; a default
(`<default>`) gives each user or client id its own budget (Kafka's metric tags).

Byte rates and request time are measured as Kafka's `Rate` over a `SampledStat` of
`quota.window.num` windows of `quota.window.size.seconds`; the throttle time of a violation is
ClientQuotaManager's: (observed - quota) / quota * the window the rate was measured over
(request_percentage's capped at one window). As Kafka's Rate, the window is never counted as
shorter than `quota.window.num - 1` windows, so a new client may send quota * (num - 1) * size
in a burst before it is throttled. controller_mutation_rate (KIP-599) is a token bucket of
quota * num * size partitions, refilled at the quota per second.
"""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..errors import QuotaExceeded
from .changes import apply_entity_changes

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
DEFAULT = "<default>"  # how Kafka's ZooKeeper paths and tools name a default entity

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"  # of an ip entity (KIP-612)
INT_MAX = 2**31 - 1  # Kafka's Int.MaxValue: no connection_creation_rate limit
_LONG, _INT = (2**63 - 1, "a LONG"), (INT_MAX, "an INT")
# Kafka's LONG and INT quota configs: (largest value, the type as Kafka's messages name it)
INTEGRAL_KEYS = {PRODUCER_BYTE_RATE: _LONG, CONSUMER_BYTE_RATE: _LONG, CONNECTION_CREATION_RATE: _INT}
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE)
IP_QUOTA_KEYS = (CONNECTION_CREATION_RATE,)
NANOS_TO_PERCENTAGE = 100.0 / 1e9  # request time is recorded as a percentage of one thread's second
MAX_THROTTLE_MS = 2**31 - 1  # responses carry it as an int32
MAX_RESOLVED = 10_000  # (quota, user, client id) lookups remembered before starting afresh


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A quota entity: the user and client-id parts it has, or an ip alone (None: the part is
    absent; Kafka's null entity name, i.e. `<default>`, is DEFAULT here)."""

    user: str | None = None
    client_id: str | None = None
    ip: str | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        """The quota keys this kind of entity takes (Kafka's QuotaConfig.ipConfigs or user/client ones)."""
        return IP_QUOTA_KEYS if self.ip is not None else QUOTA_KEYS

    def path(self) -> str:
        """Kafka's entity path: `users/<u>`, `clients/<c>`, `users/<u>/clients/<c>` or `ips/<ip>` (names
        sanitized)."""
        if self.ip is not None:
            return f"ips/{sanitize(self.ip)}"
        parts = []
        if self.user is not None:
            parts.append(f"users/{sanitize(self.user)}")
        if self.client_id is not None:
            parts.append(f"clients/{sanitize(self.client_id)}")
        return "/".join(parts)

    @classmethod
    def from_path(cls, path: str) -> QuotaEntity:
        """The entity a Kafka entity path names (ValueError for anything else)."""
        parts = path.split("/")
        if len(parts) == 2 and parts[0] == "users":
            return cls(user=desanitize(parts[1]))
        if len(parts) == 2 and parts[0] == "clients":
            return cls(client_id=desanitize(parts[1]))
        if len(parts) == 2 and parts[0] == "ips":
            return cls(ip=desanitize(parts[1]))
        if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
            return cls(desanitize(parts[1]), desanitize(parts[3]))
        raise ValueError(f"not a client quota entity path: {path!r}")

    def parts(self) -> list[tuple[str, str | None]]:
        """(entity type, name or None for the default) as DescribeClientQuotas names them."""
        found = []
        if self.user is not None:
            found.append((USER, None if self.user == DEFAULT else self.user))
        if self.client_id is not None:
            found.append((CLIENT_ID, None if self.client_id == DEFAULT else self.client_id))
        if self.ip is not None:
            found.append((IP, None if self.ip == DEFAULT else self.ip))
        return found


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: a user or client id as a ZooKeeper node name (`<default>` kept)."""
    if name == DEFAULT:
        return name
    return urllib.parse.quote(name, safe="-_.").replace("~", "%7E")  # URLEncoder's, '*' and ' ' too


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


QuotaConfigs = dict[QuotaEntity, dict[str, float]]  # entity -> quota key -> value
QuotaChanges = dict[QuotaEntity, dict[str, float | None]]  # None removes the key


def apply_quota_changes(current: Mapping[QuotaEntity, Mapping[str, float]], changes: QuotaChanges) -> QuotaConfigs:
    """The quotas after `changes`, as a new mapping; an entity left without any quota disappears."""
    return apply_entity_changes(current, changes)


def decode_quota_config(config: Mapping[str, str], keys: tuple[str, ...] = QUOTA_KEYS) -> dict[str, float]:
    """The quota keys (`keys`: the entity's) of an entity's config map (Kafka keeps SCRAM credentials
    in the same map)."""
    found = {}
    for key in keys:
        try:
            value = float(config[key])
        except (KeyError, ValueError, TypeError):
            continue
        if value > 0:  # what another writer left that no quota can be (0, negative, NaN) is ignored
            found[key] = value
    return found


def encode_quota_value(key: str, value: float) -> str:
    """As Kafka writes it: LONG keys as integers, DOUBLE keys as Java prints a double."""
    if key in INTEGRAL_KEYS:
        return str(round(value))
    return repr(float(value))


def quota_value_error(key: str, value: float, keys: tuple[str, ...] = QUOTA_KEYS) -> str | None:
    """Why Kafka refuses this quota value for an entity taking `keys` (INVALID_REQUEST), or None
    (ClientQuotaControlManager); also an integral quota too small to be stored as Kafka stores it,
    a whole number of at least 1."""
    if key not in keys:
        return f"Invalid configuration key {key}"
    if not value > 0.0:
        return f"Quota {key} must be greater than 0"
    if key in INTEGRAL_KEYS:
        largest, type_name = INTEGRAL_KEYS[key]
        if value > largest:
            return f"Proposed value for {key} is too large for {type_name}."
        if abs(math.fmod(value, 1.0)) > 1e-6:
            return f"{key} cannot be a fractional value."
        if round(value) <= 0:
            return f"Quota {key} must be greater than 0"
    return None


def precedence(user: str, client_id: str) -> tuple[tuple[QuotaEntity, tuple[str, str]], ...]:
    """Kafka's eight entities for a connection, first match wins, each with the key its usage is
    shared under ((user, client id), "" for a part the entity does not have)."""
    both, user_only, client_only = (user, client_id), (user, ""), ("", client_id)
    return (
        (QuotaEntity(user, client_id), both),
        (QuotaEntity(user, DEFAULT), both),
        (QuotaEntity(user, None), user_only),
        (QuotaEntity(DEFAULT, client_id), both),
        (QuotaEntity(DEFAULT, DEFAULT), both),
        (QuotaEntity(DEFAULT, None), user_only),
        (QuotaEntity(None, client_id), client_only),
        (QuotaEntity(None, DEFAULT), client_only),
    )


def resolve(configs: Mapping[QuotaEntity, Mapping[str, float]], key: str, user: str,
            client_id: str) -> tuple[tuple[str, str], float] | None:
    """(usage key, bound) of `key`'s quota for (user, client id); None when none applies."""
    for entity, usage_key in precedence(user, client_id):
        values = configs.get(entity)
        if values is not None and key in values:
            return usage_key, values[key]
    return None


@dataclass(frozen=True, slots=True)
class WindowConfig:
    samples: int = 11  # quota.window.num
    window_ms: int = 1000  # quota.window.size.seconds, in ms


class _Sample:
    __slots__ = ("start_ms", "value")

    def __init__(self, start_ms: int) -> None:
        self.start_ms = start_ms
        self.value = 0.0


class Rate:
    """Kafka's Rate over a SampledStat (WindowedSum): values summed per window, the sum over the
    last `samples` windows divided by the time they span (never less than samples - 1 windows)."""

    __slots__ = ("_samples", "_current", "config", "last_record_ms")

    def __init__(self, config: WindowConfig) -> None:
        self.config = config
        self._samples: list[_Sample] = []
        self._current = 0
        self.last_record_ms = 0

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.config.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        self.last_record_ms = now_ms

    def measure(self, now_ms: int) -> float:
        """Per second."""
        self._purge(now_ms)
        total = sum(sample.value for sample in self._samples)
        return total / (self.window_size_ms(now_ms) / 1000)

    def window_size_ms(self, now_ms: int) -> int:
        self._purge(now_ms)
        elapsed = now_ms - self._oldest(now_ms).start_ms
        full_windows = elapsed // self.config.window_ms
        if full_windows < self.config.samples - 1:
            elapsed += (self.config.samples - 1 - full_windows) * self.config.window_ms
        return max(elapsed, 1)

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        self._current = (self._current + 1) % self.config.samples
        if self._current >= len(self._samples):
            self._samples.append(_Sample(now_ms))
        else:
            self._samples[self._current] = _Sample(now_ms)
        return self._samples[self._current]

    def _oldest(self, now_ms: int) -> _Sample:
        self._current_sample(now_ms)
        return min(self._samples, key=lambda sample: sample.start_ms)

    def _purge(self, now_ms: int) -> None:
        expire_after = self.config.samples * self.config.window_ms
        for i, sample in enumerate(self._samples):
            if now_ms - sample.start_ms >= expire_after:
                self._samples[i] = _Sample(now_ms)


def throttle_ms(rate: Rate, bound: float, now_ms: int) -> int:
    """ClientQuotaManager.throttleTime: 0 within the quota, else (observed - quota) / quota * window."""
    observed = rate.measure(now_ms)
    if observed <= bound:
        return 0
    return round(min(MAX_THROTTLE_MS, (observed - bound) / bound * rate.window_size_ms(now_ms)))


class TokenBucket:
    """KIP-599's bucket for controller_mutation_rate: holds up to quota * samples * window
    seconds of partitions, refilled at the quota per second; starts full."""

    __slots__ = ("_tokens", "_last_ms", "config", "last_record_ms")

    def __init__(self, config: WindowConfig) -> None:
        self.config = config
        self._tokens: float | None = None
        self._last_ms = 0
        self.last_record_ms = 0

    def tokens(self, bound: float, now_ms: int) -> float:
        burst = self.config.samples * self.config.window_ms / 1000 * bound
        if self._tokens is None:
            self._tokens = burst
        else:
            self._tokens = min(burst, self._tokens + bound * (now_ms - self._last_ms) / 1000)
        self._last_ms = now_ms
        return self._tokens

    def record(self, value: float, bound: float, now_ms: int) -> None:
        self._tokens = self.tokens(bound, now_ms) - value
        self.last_record_ms = now_ms

    def throttle_ms(self, bound: float, now_ms: int) -> int:
        """ControllerMutationQuotaManager.throttleTimeMs: the time to refill a negative bucket to 0."""
        tokens = self.tokens(bound, now_ms)
        return 0 if tokens >= 0 else round(min(MAX_THROTTLE_MS, -tokens / bound * 1000))


class ClientQuotas:
    """Usage and quotas of every client, for every quota type.

    `configs` is a callable returning the current quota configs (the metadata store's view): when
    it returns a new mapping the quotas are looked up again, the usage measured so far kept.
    `enabled` is False while no quota is configured at all, so that callers skip everything.
    """

    def __init__(self, configs: Callable[[], Mapping[QuotaEntity, Mapping[str, float]]], now_ms: Callable[[], int],
                 window: WindowConfig, mutation_window: WindowConfig | None = None) -> None:
        self._configs = configs
        self.now_ms = now_ms
        self.window = window
        self.mutation_window = mutation_window or window
        self._seen: object = None
        self._types: frozenset[str] = frozenset()
        self._resolved: dict[tuple[str, str, str], tuple[tuple[str, str], float] | None] = {}
        self._rates: dict[tuple[str, tuple[str, str]], Rate] = {}
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self._prune_at = 1024

    def enabled(self, key: str | None = None) -> bool:
        """Whether any quota of a user or client id (of type `key`) is configured: one identity check
        when nothing changed. An ip's connection_creation_rate is the acceptor's (ConnectionRateQuotas)."""
        current = self._configs()
        if current is not self._seen:
            self._seen = current
            self._types = frozenset(k for entity, values in current.items() if entity.ip is None for k in values)
            self._resolved = {}
        return bool(self._types) if key is None else key in self._types

    def quota(self, key: str, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        if not self.enabled(key):
            return None
        lookup = (key, user, client_id)
        if lookup not in self._resolved:
            if len(self._resolved) >= MAX_RESOLVED:  # client ids are the clients' to invent
                self._resolved = {}
            self._resolved[lookup] = resolve(self._seen, key, user, client_id)  # type: ignore[arg-type]
        return self._resolved[lookup]

    def record(self, key: str, user: str, client_id: str, value: float) -> int:
        """Record usage against `key`'s quota; the throttle time (ms) it earns, 0 within the quota."""
        found = self.quota(key, user, client_id)
        if found is None:
            return 0
        usage_key, bound = found
        now = self.now_ms()
        rate = self._rate(key, usage_key, now)
        rate.record(value, now)
        throttle = throttle_ms(rate, bound, now)
        if key == REQUEST_PERCENTAGE:  # ClientRequestQuotaManager bounds it by one window
            throttle = min(throttle, self.window.window_ms)
        return throttle

    def unrecord(self, key: str, user: str, client_id: str, value: float) -> None:
        """Take back usage recorded (a fetch answered empty because it was throttled)."""
        found = self.quota(key, user, client_id)
        if found is not None:
            now = self.now_ms()
            self._rate(key, found[0], now).record(-value, now)

    def max_value_in_window(self, key: str, user: str, client_id: str) -> float | None:
        """The most one response may hold and ever pass the quota (Kafka's
        getMaxValueInQuotaWindow): quota * (samples - 1) * window; None without a quota."""
        found = self.quota(key, user, client_id)
        if found is None:
            return None
        return found[1] * (self.window.samples - 1) * self.window.window_ms / 1000

    def mutation(self, user: str, client_id: str, strict: bool) -> MutationQuota | None:
        """The controller mutation quota of one request (None when none applies)."""
        found = self.quota(CONTROLLER_MUTATION_RATE, user, client_id)
        if found is None:
            return None
        usage_key, bound = found
        bucket = self._buckets.get(usage_key)
        if bucket is None:
            bucket = self._buckets[usage_key] = TokenBucket(self.mutation_window)
        return MutationQuota(bucket, bound, self.now_ms, strict)

    def _rate(self, key: str, usage_key: tuple[str, str], now_ms: int) -> Rate:
        rate = self._rates.get((key, usage_key))
        if rate is None:
            if len(self._rates) >= self._prune_at:
                self._prune(now_ms)
            rate = self._rates[(key, usage_key)] = Rate(self.window)
        return rate

    def _prune(self, now_ms: int) -> None:
        """Forget rates idle for all their windows: every sample would be purged, so a new Rate
        measures the same. Keeps memory bounded by the clients active in the last window span."""
        span = self.window.samples * self.window.window_ms
        self._rates = {k: r for k, r in self._rates.items() if now_ms - r.last_record_ms < span}
        self._prune_at = max(1024, 2 * len(self._rates))


class MutationQuota:
    """One CreateTopics/CreatePartitions/DeleteTopics request's controller mutation quota.

    Strict (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+): a mutation is refused with
    QuotaExceeded while the bucket is below zero; one that finds it at or above zero goes through
    whatever its size. Permissive (older versions): every mutation goes through, recorded.
    """

    def __init__(self, bucket: TokenBucket, bound: float, now_ms: Callable[[], int], strict: bool) -> None:
        self._bucket = bucket
        self._bound = bound
        self._now_ms = now_ms
        self.strict = strict
        self._throttle_ms = 0
        self._throttled_at = 0

    def record(self, partitions: int) -> None:
        now = self._now_ms()
        if self.strict:
            throttle = self._bucket.throttle_ms(self._bound, now)
            if throttle > 0:
                self._throttle_ms, self._throttled_at = throttle, now
                raise QuotaExceeded(throttle)
        self._bucket.record(partitions, self._bound, now)
        if not self.strict:
            throttle = self._bucket.throttle_ms(self._bound, now)
            if throttle > 0:
                self._throttle_ms, self._throttled_at = throttle, now

    def throttle_ms(self) -> int:
        """The throttle time to answer with, less the time since it was computed (Kafka's)."""
        return max(0, self._throttle_ms - (self._now_ms() - self._throttled_at))
