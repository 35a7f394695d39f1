"""Fuzz target: what an inter-broker client does with bytes from its peer (cluster/broker_client.py).

A response frame goes through `decode_response` (bounded by the schema walk, then kio) as the
WriteTxnMarkers v1 answer to request `CORRELATION`. Any input must end in ConnectionError (the
client closes the connection and the requests on it fail) or in a decoded response.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from logbus.cluster.broker_client import decode_response
from logbus.protocol.codec import encode, make, response_class, response_module

CORRELATION = 7
API_KEY, VERSION = 27, 1
_CLASS = response_class(API_KEY, VERSION)
_MODULE = response_module(API_KEY, VERSION)


def _frame(partitions: int) -> bytes:
    result = make(_MODULE.WritableTxnMarkerResult, producer_id=1000, topics=(
        make(_MODULE.WritableTxnMarkerTopicResult, name="t", partitions=tuple(
            make(_MODULE.WritableTxnMarkerPartitionResult, partition_index=i, error_code=ErrorCode.none)
            for i in range(partitions))),))
    body = make(_CLASS, markers=(result,))
    return CORRELATION.to_bytes(4, "big") + b"\x00" + b"".join(encode(body))


SEEDS = [_frame(0), _frame(3), b"\x00" * 9]


def fuzz_one(data: bytes) -> None:
    try:
        decode_response(_CLASS, data, CORRELATION)
    except ConnectionError:
        return
