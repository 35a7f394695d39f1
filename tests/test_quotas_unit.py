"""Client quotas, sans-I/O: Kafka's precedence, Rate windows, throttle times, the mutation bucket."""

from __future__ import annotations

import pytest

from logbus.security.quotas import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotas,
    QuotaEntity,
    QuotaExceeded,
    Rate,
    WindowConfig,
    apply_quota_changes,
    decode_quota_config,
    quota_value_error,
    resolve,
    sanitize,
    throttle_ms,
)

WINDOW = WindowConfig(samples=11, window_ms=1000)
EIGHT_LEVELS = [  # Kafka's order, most specific first
    QuotaEntity("alice", "app"), QuotaEntity("alice", DEFAULT), QuotaEntity("alice", None),
    QuotaEntity(DEFAULT, "app"), QuotaEntity(DEFAULT, DEFAULT), QuotaEntity(DEFAULT, None),
    QuotaEntity(None, "app"), QuotaEntity(None, DEFAULT),
]


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.mark.parametrize("level", range(8))
def test_the_most_specific_configured_entity_wins(level: int) -> None:
    configs = {entity: {PRODUCER_BYTE_RATE: float(i + 1)} for i, entity in enumerate(EIGHT_LEVELS[level:], level)}
    usage_key, bound = resolve(configs, PRODUCER_BYTE_RATE, "alice", "app")
    assert bound == level + 1
    entity = EIGHT_LEVELS[level]
    assert usage_key == ("alice" if entity.user is not None else "", "app" if entity.client_id is not None else "")


def test_precedence_is_per_quota_type_and_other_clients_fall_through() -> None:
    configs = {QuotaEntity("alice", "app"): {CONSUMER_BYTE_RATE: 5.0},
               QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 7.0}}
    assert resolve(configs, PRODUCER_BYTE_RATE, "alice", "app") == (("", "app"), 7.0)
    assert resolve(configs, CONSUMER_BYTE_RATE, "alice", "app") == (("alice", "app"), 5.0)
    assert resolve(configs, CONSUMER_BYTE_RATE, "bob", "app") is None
    assert resolve(configs, PRODUCER_BYTE_RATE, "bob", "other") == (("", "other"), 7.0)


def test_rate_counts_at_least_samples_minus_one_windows() -> None:
    clock = Clock()
    rate = Rate(WINDOW)
    rate.record(10_000, clock.ms)
    assert rate.window_size_ms(clock.ms) == 10_000
    assert rate.measure(clock.ms) == pytest.approx(1000.0)
    clock.ms += 10_500
    assert rate.window_size_ms(clock.ms) == 10_500
    clock.ms += 600  # the first window is now older than 11 windows: purged
    assert rate.measure(clock.ms) == 0.0


def test_throttle_time_is_kafkas_formula() -> None:
    clock = Clock()
    rate = Rate(WINDOW)
    rate.record(20_000, clock.ms)  # 2000/s observed over 10 s against a quota of 1000/s
    assert throttle_ms(rate, 1000.0, clock.ms) == round((2000 - 1000) / 1000 * 10_000)
    assert throttle_ms(rate, 2000.0, clock.ms) == 0


def test_a_throttled_client_is_back_within_quota_once_its_windows_pass() -> None:
    clock = Clock()
    quotas = ClientQuotas(lambda: {QuotaEntity(None, "app"): {PRODUCER_BYTE_RATE: 1000.0}}, clock, WINDOW)
    assert quotas.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "app", 9_000) == 0  # within 10 s * 1000/s
    throttle = quotas.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "app", 3_000)
    assert throttle > 0
    assert quotas.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "other", 3_000) == 0  # no quota for it
    clock.ms += WINDOW.samples * WINDOW.window_ms
    assert quotas.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "app", 0) == 0


def test_usage_is_shared_under_a_user_quota_and_separate_under_a_default() -> None:
    clock = Clock()
    configs = {QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 1000.0},
               QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 1000.0}}
    quotas = ClientQuotas(lambda: configs, clock, WINDOW)
    assert quotas.record(PRODUCER_BYTE_RATE, "alice", "a", 8_000) == 0
    assert quotas.record(PRODUCER_BYTE_RATE, "alice", "b", 8_000) > 0  # alice's budget, whatever the client
    assert quotas.record(PRODUCER_BYTE_RATE, "bob", "a", 8_000) == 0
    assert quotas.record(PRODUCER_BYTE_RATE, "bob", "b", 8_000) == 0  # each client id its own budget


def test_unrecord_takes_usage_back() -> None:
    clock = Clock()
    quotas = ClientQuotas(lambda: {QuotaEntity(None, DEFAULT): {CONSUMER_BYTE_RATE: 1000.0}}, clock, WINDOW)
    assert quotas.record(CONSUMER_BYTE_RATE, "u", "c", 12_000) > 0
    quotas.unrecord(CONSUMER_BYTE_RATE, "u", "c", 12_000)
    assert quotas.record(CONSUMER_BYTE_RATE, "u", "c", 5_000) == 0
    assert quotas.max_value_in_window(CONSUMER_BYTE_RATE, "u", "c") == 10_000


def test_request_percentage_throttle_is_capped_at_one_window() -> None:
    clock = Clock()
    quotas = ClientQuotas(lambda: {QuotaEntity(None, DEFAULT): {REQUEST_PERCENTAGE: 1.0}}, clock, WINDOW)
    assert quotas.record(REQUEST_PERCENTAGE, "u", "c", 500.0) == WINDOW.window_ms


def test_enabled_follows_the_configs_it_reads() -> None:
    configs: dict = {}
    quotas = ClientQuotas(lambda: configs, Clock(), WINDOW)
    assert not quotas.enabled()
    configs = {QuotaEntity(None, "c"): {PRODUCER_BYTE_RATE: 1.0}}
    assert quotas.enabled() and quotas.enabled(PRODUCER_BYTE_RATE) and not quotas.enabled(CONSUMER_BYTE_RATE)
    assert quotas.record(CONSUMER_BYTE_RATE, "u", "c", 1e12) == 0


def test_strict_mutations_are_refused_once_the_bucket_is_empty() -> None:
    clock = Clock()
    quotas = ClientQuotas(lambda: {QuotaEntity(None, DEFAULT): {CONTROLLER_MUTATION_RATE: 2.0}}, clock, WINDOW)
    first = quotas.mutation("u", "c", strict=True)
    first.record(30)  # a full bucket (2/s * 11 s = 22) lets any one mutation through
    assert first.throttle_ms() == 0
    second = quotas.mutation("u", "c", strict=True)
    with pytest.raises(QuotaExceeded) as refused:
        second.record(1)
    assert refused.value.throttle_ms == round(8 / 2.0 * 1000)  # 8 partitions below zero at 2/s
    assert second.throttle_ms() == 4000
    clock.ms += 1000
    assert second.throttle_ms() == 3000  # less the time since
    permissive = quotas.mutation("u", "c", strict=False)
    permissive.record(1)
    assert permissive.throttle_ms() == round(7 / 2.0 * 1000)


def test_changes_and_value_validation() -> None:
    entity = QuotaEntity("alice", None)
    configs = apply_quota_changes({}, {entity: {PRODUCER_BYTE_RATE: 10.0, REQUEST_PERCENTAGE: 5.0}})
    assert apply_quota_changes(configs, {entity: {PRODUCER_BYTE_RATE: None}}) == {entity: {REQUEST_PERCENTAGE: 5.0}}
    assert apply_quota_changes(configs, {entity: {PRODUCER_BYTE_RATE: None, REQUEST_PERCENTAGE: None}}) == {}
    assert configs == {entity: {PRODUCER_BYTE_RATE: 10.0, REQUEST_PERCENTAGE: 5.0}}  # untouched
    assert quota_value_error("nope", 1.0) == "Invalid configuration key nope"
    assert quota_value_error(PRODUCER_BYTE_RATE, 0.0) == "Quota producer_byte_rate must be greater than 0"
    assert quota_value_error(PRODUCER_BYTE_RATE, 1.5) == "producer_byte_rate cannot be a fractional value."
    assert quota_value_error(REQUEST_PERCENTAGE, 1.5) is None
    assert quota_value_error(PRODUCER_BYTE_RATE, 1e-7) == "Quota producer_byte_rate must be greater than 0"
    assert quota_value_error(PRODUCER_BYTE_RATE, float("nan")) == "Quota producer_byte_rate must be greater than 0"
    assert decode_quota_config({PRODUCER_BYTE_RATE: "0", CONSUMER_BYTE_RATE: "x", REQUEST_PERCENTAGE: "2.5"}) == \
        {REQUEST_PERCENTAGE: 2.5}


def test_a_throttle_time_fits_in_a_response() -> None:
    quotas = ClientQuotas(lambda: {QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 1.0}}, Clock(), WINDOW)
    assert quotas.record(PRODUCER_BYTE_RATE, "u", "c", 1e12) == 2**31 - 1


def test_entity_paths_are_kafkas() -> None:
    assert QuotaEntity("alice", None).path() == "users/alice"
    assert QuotaEntity(DEFAULT, "a b*").path() == "users/<default>/clients/a%20b%2A"
    assert QuotaEntity(None, DEFAULT).path() == "clients/<default>"
    for entity in (QuotaEntity("a/b", "x~y"), QuotaEntity(None, "c"), QuotaEntity(DEFAULT, None)):
        assert QuotaEntity.from_path(entity.path()) == entity
    assert sanitize("user@example.com") == "user%40example.com"
    with pytest.raises(ValueError):
        QuotaEntity.from_path("topics/t")
