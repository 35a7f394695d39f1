"""Storage config keys whose effect is only visible over time, against a real broker process."""

from __future__ import annotations

import os

from helpers import wait_until
from test_storage import checkpointed, create_topic, delete_records, produce

from logbus.testing import running_broker

HOUR_MS = "3600000"


def test_log_flush_start_offset_checkpoint_interval_ms_sets_when_log_starts_are_checkpointed() -> None:
    config = {"log.flush.offset.checkpoint.interval.ms": HOUR_MS,
              "log.flush.start.offset.checkpoint.interval.ms": "100"}
    with running_broker(config=config) as broker:
        create_topic(broker, "starts")
        produce(broker, "starts", [b"s"] * 5)
        assert delete_records(broker, "starts", 3) == 3
        wait_until(lambda: checkpointed(broker, "log-start-offset-checkpoint", "starts") == 3,
                   message="the log start offset checkpointed within its interval")
        assert not os.path.exists(os.path.join(broker.data_dir, "recovery-point-offset-checkpoint")), (
            "the recovery point keeps its own (hour-long) interval"
        )
