"""The console's time series with a fake clock: lag is end - committed summed over a group's partitions,
rates are deltas over time (a drop reads as 0), and samples older than the retention are forgotten."""

from __future__ import annotations

from logbus.console.charts import line_chart
from logbus.console.history import History, partition_lag, rates


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_lag_is_end_minus_committed_summed_over_the_group() -> None:
    clock = FakeClock()
    history = History(retention_s=60, clock=clock)
    history.record({("t", 0): 10, ("t", 1): 7, ("u", 0): 5}, {"g": {("t", 0): 4, ("t", 1): 7}})
    assert history.group_lag("g") == [(1000.0, 6.0)]
    assert history.latest_group_lag("g") == 6
    assert history.latest_group_lag("unknown") is None


def test_partition_lag_is_unknown_without_both_offsets_and_never_negative() -> None:
    assert partition_lag(None, 3) is None and partition_lag(3, None) is None
    assert partition_lag(3, 5) == 0 and partition_lag(8, 5) == 3


def test_rates_are_deltas_per_second_and_a_drop_reads_as_zero() -> None:
    clock = FakeClock()
    history = History(retention_s=600, clock=clock)
    for end, committed in ((0, 0), (50, 20), (150, 70), (10, 0)):
        history.record({("t", 0): end}, {"g": {("t", 0): committed}})
        clock.now += 10
    assert history.topic_produced_rate("t") == [(1010.0, 5.0), (1020.0, 10.0), (1030.0, 0.0)]
    assert history.group_consumed_rate("g") == [(1010.0, 2.0), (1020.0, 5.0), (1030.0, 0.0)]
    assert history.latest_produced_rate("t") == 0.0
    assert rates([(1.0, 5.0), (1.0, 9.0)]) == []  # no time between samples: no rate


def test_samples_older_than_the_retention_are_forgotten() -> None:
    clock = FakeClock()
    history = History(retention_s=30, clock=clock)
    history.record({("gone", 0): 1}, {"old": {("gone", 0): 0}})
    for _ in range(10):
        clock.now += 10
        history.record({("t", 0): 1}, {"g": {("t", 0): 1}})
    assert [at for at, _ in history.group_lag("g")] == [1070.0, 1080.0, 1090.0, 1100.0]
    assert "old" not in history.groups and "gone" not in history.topics


def test_the_chart_plots_the_values_in_its_window_oldest_first() -> None:
    svg = str(line_chart("lag", "lag <of> group", [(900.0, 9.0), (1000.0, 1.0), (1050.0, 3.0)], now=1060.0,
                         window_s=100.0, unit="records"))
    assert 'data-values="1 3"' in svg and "lag &lt;of&gt; group" in svg and "<of>" not in svg
    assert 'data-values=""' in str(line_chart("lag", "lag", [], now=1.0, window_s=60.0, unit="records"))
