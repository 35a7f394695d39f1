"""bench/scale_bench.py end to end on a small cluster (30 partitions, 2 s ZooKeeper sessions), and
how it judges its figures. The bench's numbers are not checked here, only that every step
measures what it says."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: `bench` is not installed

from bench import scale_bench  # noqa: E402


def test_one_repetition_measures_every_step() -> None:
    args = scale_bench.parse(["--partitions", "30", "--topics", "3", "--session-timeout-ms", "2000",
                              "--rate", "200", "--samples", "3", "--steady-s", "1", "--deadline", "60",
                              "--idle-s", "0.5"])
    rep = scale_bench.measure_rep(args)
    assert "failed" not in rep, rep
    assert (rep["topics"], rep["partitions"]) == (3, 30)
    assert rep["registration_s"] > 0 and rep["create_s"] > 0
    assert 0 < rep["metadata_ms"]["min"] <= rep["metadata_ms"]["max"]
    for idle in (rep["idle_empty"], rep["idle"]):  # the brokers' CPU while nothing is asked: before, after the create
        assert 0 <= idle["cpu_percent"]["min"] <= idle["cpu_percent"]["max"] <= idle["cpu_percent_all"]
        assert idle["rss_mib"]["min"] > 0
    assert all(rep["resources_after"][b]["fds"] > rep["resources_before"][b]["fds"] for b in (1, 2, 3))
    assert rep["create_cpu_ms_per_replica"] > 0  # the brokers' CPU for the create, whatever the load
    sigterm, kill = rep["sigterm"], rep["controller_kill"]
    assert sigterm["broker"] != kill["broker"] and sigterm["led_before"] > 0  # the SIGTERM spares the controller
    assert sigterm["exit_s"] <= sigterm["all_led_s"]
    produced = sigterm["producer"]
    assert produced["sent"] > 30 and produced["acked"] + produced["failed"] == produced["sent"]
    assert kill["new_controller_s"] <= kill["all_led_s"]
    for restarted in (sigterm["restart"], kill["restart"]):
        assert 0 < restarted["listening_s"] <= restarted["loaded_s"] <= restarted["in_every_isr_s"]
    summary = scale_bench.summarize([rep], scale_bench.FIGURES, args.session_timeout_ms)
    assert summary["create_s"]["min"] == summary["create_s"]["max"] == rep["create_s"]


def test_a_target_is_met_only_when_the_worst_repetition_meets_it() -> None:
    reps = [{"create_s": 12.0}, {"create_s": 16.0}, {"create_s": 14.0}]
    summary = scale_bench.summarize(reps, {"create_s": lambda r: r["create_s"]}, 6000)["create_s"]
    assert (summary["min"], summary["median"], summary["max"], summary["met"]) == (12.0, 14.0, 16.0, False)
    assert scale_bench.summarize(reps[:1], {"create_s": lambda r: r["create_s"]}, 6000)["create_s"]["met"]


def test_partitions_are_spread_over_the_topics() -> None:
    assert scale_bench.topic_sizes(10, 3) == {"scale-0000": 4, "scale-0001": 3, "scale-0002": 3}
    assert scale_bench.topic_sizes(2, 3) == {"scale-0000": 1, "scale-0001": 1}


def test_create_requests_stay_within_the_brokers_bound() -> None:
    """100,000 partitions in 1,000 topics go out as requests a broker accepts (Kafka's controller
    refuses more than 10,000 partitions in one with POLICY_VIOLATION), every topic once."""
    sizes = scale_bench.topic_sizes(100_000, 1000)
    batches = scale_bench.request_batches(sizes)
    assert all(0 < sum(batch.values()) <= scale_bench.CREATE_REQUEST_PARTITIONS for batch in batches)
    assert scale_bench.CREATE_REQUEST_PARTITIONS <= scale_bench.MAX_PARTITIONS_PER_REQUEST
    assert {name: count for batch in batches for name, count in batch.items()} == sizes
    assert scale_bench.request_batches({"big": 12_000}) == [{"big": 12_000}]  # one topic is never split
