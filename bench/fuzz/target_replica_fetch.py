"""Fuzz target: what a follower does with bytes from its leader (cluster/fetcher.py).

A Fetch response frame goes through `decode_fetch_response` (protocol/replica_fetch.py), each partition's
records through `fetched_batches`, and what passes is appended with `append_as_follower` to a real
log in a temp dir. Any input must end in ConnectionError (the fetcher reconnects),
CorruptRecordError / KafkaApiError (the fetch is retried), FollowerAppendError (batches that do not
continue the log) or in an append after which the log still loads with the same end offset.
"""

from __future__ import annotations

import datetime
import shutil
import tempfile

from kio.schema.errors import ErrorCode

from logbus.cluster.fetcher import decode_fetch_response, fetched_batches
from logbus.config import BrokerConfig, log_config
from logbus.errors import KafkaApiError
from logbus.protocol.codec import encode, make, response_module
from logbus.protocol.records import CorruptRecordError, build_batch
from logbus.storage.log import FollowerAppendError, PartitionLog

CORRELATION = 7
_RESPONSE = response_module(1, 12)
REJECTIONS = (ConnectionError, CorruptRecordError, KafkaApiError, FollowerAppendError)
_CONFIG = log_config(BrokerConfig({}), {})


def _frame(records: bytes) -> bytes:
    partition = make(_RESPONSE.PartitionData, partition_index=0, error_code=ErrorCode.none, high_watermark=3,
                     last_stable_offset=3, log_start_offset=0, aborted_transactions=None,
                     preferred_read_replica=-1, records=records)
    body = make(_RESPONSE.FetchResponse, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,
                responses=(make(_RESPONSE.FetchableTopicResponse, topic="t", partitions=(partition,)),))
    return CORRELATION.to_bytes(4, "big") + b"\x00" + b"".join(encode(body))


SEEDS = [_frame(build_batch([(b"k", b"v"), (None, b"w")], 1_700_000_000_000)), _frame(b""), b"\x00" * 9]


def fuzz_one(data: bytes) -> None:
    try:
        response = decode_fetch_response(data, CORRELATION)
        batches = [fetched_batches(p.records or b"") for t in response.responses for p in t.partitions]
    except REJECTIONS:
        return
    directory = tempfile.mkdtemp(prefix="fuzz-follower-")
    try:
        log = PartitionLog(directory, "t", 0, _CONFIG)
        log.load(0, 0, clean_shutdown=False)
        for records, headers in batches:
            if headers:
                try:
                    log.append_as_follower(records, headers)
                except REJECTIONS:
                    continue
        end = log.log_end_offset
        log.close_files()
        again = PartitionLog(directory, "t", 0, _CONFIG)
        again.load(0, 0, clean_shutdown=False)
        assert again.log_end_offset == end, f"log end {end} became {again.log_end_offset} after a reload"
        again.close_files()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
