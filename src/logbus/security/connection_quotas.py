"""Connection creation rate quotas (KIP-612), as Kafka's ConnectionQuotas applies them (sans-I/O;
the clock is passed in, in milliseconds).

- `max.connection.creation.rate` (broker-wide) and `listener.name.<l>.max.connection.creation.rate`:
  each connection a listener accepts is recorded against the broker's rate and its listener's; over
  either, the listener's acceptor waits the throttle time before it hands the connection on and
  accepts the next (connections are delayed, not refused). When there are several listeners, the
  inter-broker one is held to its own listener rate only, so that brokers always reach each other.
- `connection_creation_rate` of an ip entity (`ip=<address>`, else `ip=<default>`): recorded per
  client address once the acceptor goes on. A connection over it is not served: it is closed once
  its throttle time has passed (Kafka's ConnectionThrottledException) and taken back from every
  rate, as it was never accepted.

The rates are Kafka's `Rate` over `quota.window.num` windows of `quota.window.size.seconds`
(quotas.Rate); a throttle time is QuotaUtils.boundedThrottleTime's, (rate - quota) / quota * the
window the rate was measured over, at most one quota window. A quota of Int.MaxValue (the
default) is no quota: nothing is recorded against it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping

from .quotas import CONNECTION_CREATION_RATE, DEFAULT, INT_MAX, QuotaEntity, Rate, WindowConfig, throttle_ms

BROKER = ""  # the key of the broker-wide rate among the listener rates
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_ip(text: str) -> IpAddress | None:
    """`text` as an IP address (an IPv6 scope kept), or None when it is not one."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


class ConnectionRateQuotas:
    def __init__(self, broker_rate: int, listener_rates: Mapping[str, int], protected_listener: str | None,
                 ip_quotas: Callable[[], Mapping[QuotaEntity, Mapping[str, float]]], window: WindowConfig,
                 now_ms: Callable[[], int]) -> None:
        """`listener_rates`: each listener's own rate (listener name -> connections per second);
        `protected_listener`: the inter-broker listener when there are several, else None;
        `ip_quotas`: the store's client quotas (a new mapping after each change)."""
        self._bounds = {BROKER: broker_rate, **listener_rates}
        self._protected = protected_listener
        self._ip_quotas = ip_quotas
        self.window = window
        self._now_ms = now_ms
        self._rates = {name: Rate(window) for name, bound in self._bounds.items() if bound < INT_MAX}
        self._ip_rates: dict[IpAddress, Rate] = {}
        self._prune_at = 1024
        self._seen: object = None
        self._ip_bounds: dict[IpAddress, float] = {}
        self._default_ip_bound = float(INT_MAX)

    def record_accept(self, listener: str) -> int:
        """Record a connection accepted on `listener`; the time (ms) its acceptor waits before going on."""
        now = self._now_ms()
        return max((self._record(self._rates[name], self._bounds[name], now) for name in self._held_to(listener)
                    if name in self._rates), default=0)

    def record_ip(self, listener: str, host: str) -> int:
        """Record a connection from `host` against its ip quota: 0 (it is served), or the time (ms)
        after which it is to be closed unserved (then it is taken back from every rate)."""
        address = parse_ip(host)
        bound = INT_MAX if address is None else self._ip_bound(address)
        if bound >= INT_MAX:
            return 0
        now = self._now_ms()
        rate = self._ip_rate(address, now)
        throttle = self._record(rate, bound, now)
        if throttle > 0:
            rate.record(-1, now)
            for name in self._held_to(listener):
                if name in self._rates:
                    self._rates[name].record(-1, now)
        return throttle

    def _held_to(self, listener: str) -> tuple[str, ...]:
        """The rates a connection on `listener` counts against."""
        return (listener,) if listener == self._protected else (BROKER, listener)

    def _record(self, rate: Rate, bound: float, now: int) -> int:
        rate.record(1, now)
        if bound <= 0:  # every connection is over it (Kafka's infinite throttle, bounded)
            return self.window.window_ms
        return min(throttle_ms(rate, bound, now), self.window.window_ms)

    def _ip_bound(self, address: IpAddress) -> float:
        """connection_creation_rate of `address`: its own entity's, else the default ip entity's."""
        current = self._ip_quotas()
        if current is not self._seen:
            self._seen = current
            self._ip_bounds = {parse_ip(entity.ip): values[CONNECTION_CREATION_RATE]
                               for entity, values in current.items()
                               if entity.ip not in (None, DEFAULT) and CONNECTION_CREATION_RATE in values}
            self._default_ip_bound = current.get(QuotaEntity(ip=DEFAULT), {}).get(CONNECTION_CREATION_RATE, INT_MAX)
        return self._ip_bounds.get(address, self._default_ip_bound)

    def _ip_rate(self, address: IpAddress, now_ms: int) -> Rate:
        rate = self._ip_rates.get(address)
        if rate is None:
            if len(self._ip_rates) >= self._prune_at:
                self._prune(now_ms)
            rate = self._ip_rates[address] = Rate(self.window)
        return rate

    def _prune(self, now_ms: int) -> None:
        """Forget addresses idle for all their windows (a new Rate measures them the same)."""
        span = self.window.samples * self.window.window_ms
        self._ip_rates = {a: r for a, r in self._ip_rates.items() if now_ms - r.last_record_ms < span}
        self._prune_at = max(1024, 2 * len(self._ip_rates))
