"""Request decoding for every API and version the broker serves: header, bounded pre-scan, kio.

The input is a whole request frame (without its size prefix), handled exactly as the server
does before a handler runs. A refusal is MalformedRequestError; anything else escaping is a bug,
and so is a crash (kio's native decoder reserving what a count claims aborts the process).
"""

from __future__ import annotations

from bench.fuzz.samples import sample_frame, served_versions
from logbus.broker.apis import registry
from logbus.protocol import codec
from logbus.protocol.frames import MalformedRequestError, parse_request_header, peek_api

SEEDS = [sample_frame(api_key, version, width) for api_key, version in served_versions() for width in (0, 1, 2)]
_SPECS = registry()


def fuzz_one(data: bytes) -> None:
    try:
        api_key, version, _correlation_id = peek_api(data)
        spec = _SPECS.get(api_key)
        if spec is None or not spec.serves(version):
            return  # the server closes the connection (or answers ApiVersions v0) before decoding
        header = parse_request_header(data, codec.is_flexible(api_key, version))
        codec.decode_request(api_key, version, data, header.body_offset)
    except MalformedRequestError:
        return
