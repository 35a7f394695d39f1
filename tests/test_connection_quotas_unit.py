"""Connection creation rate quotas (KIP-612), sans-I/O with an injected clock: the broker, listener
and ip rates as Kafka's ConnectionQuotas measures them, its throttle times, and the ip entities'
validation, paths and precedence."""

from __future__ import annotations

from logbus.security.connection_quotas import ConnectionRateQuotas
from logbus.security.quotas import (
    CONNECTION_CREATION_RATE,
    DEFAULT,
    INT_MAX,
    IP_QUOTA_KEYS,
    PRODUCER_BYTE_RATE,
    ClientQuotas,
    QuotaEntity,
    WindowConfig,
    decode_quota_config,
    quota_value_error,
)

WINDOW = WindowConfig(samples=2, window_ms=1000)  # a Rate then spans at least one window: 1 s


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def quotas(clock: Clock, broker: int = INT_MAX, listeners: dict[str, int] | None = None, protected: str | None = None,
           ips: dict[QuotaEntity, dict[str, float]] | None = None) -> ConnectionRateQuotas:
    configs = ips or {}
    return ConnectionRateQuotas(broker, listeners or {"A": INT_MAX, "B": INT_MAX}, protected, lambda: configs,
                                WINDOW, clock)


def test_the_acceptor_waits_kafkas_throttle_time_once_over_the_broker_rate() -> None:
    clock = Clock()
    limited = quotas(clock, broker=5)
    assert [limited.record_accept("A") for _ in range(5)] == [0] * 5  # 5 in a 1 s window: at the rate
    assert limited.record_accept("B") == round((6 - 5) / 5 * 1000)  # (rate - quota) / quota * window
    assert limited.record_accept("A") == round((7 - 5) / 5 * 1000)
    clock.ms += 2 * WINDOW.window_ms  # every window expired
    assert limited.record_accept("A") == 0


def test_a_throttle_time_is_at_most_one_window_and_a_zero_rate_always_waits_it() -> None:
    clock = Clock()
    limited = quotas(clock, broker=1)
    assert [limited.record_accept("A") for _ in range(20)][-1] == WINDOW.window_ms
    assert quotas(clock, broker=0).record_accept("A") == WINDOW.window_ms


def test_listener_rates_are_their_own_and_the_inter_broker_listener_is_spared_the_broker_rate() -> None:
    clock = Clock()
    limited = quotas(clock, broker=2, listeners={"A": 1, "B": INT_MAX, "INTERNAL": 3}, protected="INTERNAL")
    assert limited.record_accept("A") == 0
    assert limited.record_accept("A") > 0  # A's own rate; the broker's is at 2, its quota
    assert limited.record_accept("B") > 0  # the broker's rate
    assert [limited.record_accept("INTERNAL") for _ in range(3)] == [0, 0, 0]  # not counted in the broker's
    assert limited.record_accept("INTERNAL") > 0  # its listener rate holds it


def test_an_ip_over_its_rate_is_refused_and_taken_back_from_every_rate() -> None:
    clock = Clock()
    ips = {QuotaEntity(ip="127.0.0.1"): {CONNECTION_CREATION_RATE: 2.0}}
    limited = quotas(clock, broker=3, ips=ips)
    results = []
    for _ in range(5):
        limited.record_accept("A")
        results.append(limited.record_ip("A", "127.0.0.1"))
    assert results[:2] == [0, 0] and all(ms > 0 for ms in results[2:])
    assert results[2] == round((3 - 2) / 2 * 1000)
    # the refused ones do not count: the broker's rate holds the 2 served, room for one more
    assert limited.record_accept("A") == 0
    assert limited.record_ip("A", "127.0.0.2") == 0  # no quota for it
    assert limited.record_ip("A", "not an address") == 0


def test_an_ip_has_its_own_rate_else_the_default_ip_rate_each_address_its_own_budget() -> None:
    clock = Clock()
    ips = {QuotaEntity(ip=DEFAULT): {CONNECTION_CREATION_RATE: 1.0},
           QuotaEntity(ip="::1"): {CONNECTION_CREATION_RATE: 3.0}}
    limited = quotas(clock, ips=ips)
    assert [limited.record_ip("A", "10.0.0.1") for _ in range(2)][1] > 0
    assert limited.record_ip("A", "10.0.0.2") == 0  # a budget of its own
    assert [limited.record_ip("A", "0:0::1") for _ in range(3)] == [0, 0, 0]  # the same address as ::1
    assert limited.record_ip("A", "::1") > 0


def test_ip_quotas_follow_the_configs_they_read() -> None:
    clock = Clock()
    configs: dict[QuotaEntity, dict[str, float]] = {}
    limited = ConnectionRateQuotas(INT_MAX, {"A": INT_MAX}, None, lambda: configs, WINDOW, clock)
    assert [limited.record_ip("A", "127.0.0.1") for _ in range(3)] == [0, 0, 0]  # nothing recorded: no quota
    configs = {QuotaEntity(ip="127.0.0.1"): {CONNECTION_CREATION_RATE: 1.0}}
    assert limited.record_ip("A", "127.0.0.1") == 0
    assert limited.record_ip("A", "127.0.0.1") > 0


def test_ip_quotas_are_not_request_quotas() -> None:
    client_quotas = ClientQuotas(lambda: {QuotaEntity(ip=DEFAULT): {CONNECTION_CREATION_RATE: 5.0}}, Clock(), WINDOW)
    assert not client_quotas.enabled()


def test_ip_entities_take_only_connection_creation_rate_an_int() -> None:
    assert quota_value_error(CONNECTION_CREATION_RATE, 10.0, IP_QUOTA_KEYS) is None
    assert quota_value_error(PRODUCER_BYTE_RATE, 10.0, IP_QUOTA_KEYS) == "Invalid configuration key producer_byte_rate"
    assert quota_value_error(CONNECTION_CREATION_RATE, 10.0) == "Invalid configuration key connection_creation_rate"
    assert quota_value_error(CONNECTION_CREATION_RATE, 2.5, IP_QUOTA_KEYS) == \
        "connection_creation_rate cannot be a fractional value."
    assert quota_value_error(CONNECTION_CREATION_RATE, 2.0**31, IP_QUOTA_KEYS) == \
        "Proposed value for connection_creation_rate is too large for an INT."
    assert decode_quota_config({CONNECTION_CREATION_RATE: "7", PRODUCER_BYTE_RATE: "9"}, IP_QUOTA_KEYS) == \
        {CONNECTION_CREATION_RATE: 7.0}


def test_ip_entity_paths_are_kafkas() -> None:
    assert QuotaEntity(ip="127.0.0.1").path() == "ips/127.0.0.1"
    assert QuotaEntity(ip=DEFAULT).path() == "ips/<default>"
    assert QuotaEntity(ip="fe80::1").path() == "ips/fe80%3A%3A1"
    for entity in (QuotaEntity(ip="fe80::1"), QuotaEntity(ip=DEFAULT)):
        assert QuotaEntity.from_path(entity.path()) == entity
    assert QuotaEntity(ip=DEFAULT).parts() == [("ip", None)]
