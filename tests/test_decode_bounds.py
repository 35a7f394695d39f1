"""The bounded pre-scan (protocol/bounds.py): every well-formed request of every served API version
passes it and decodes as kio decodes it; a count or length larger than the frame, or a null the
schema forbids, is refused before kio allocates anything."""

from __future__ import annotations

import dataclasses
import struct
import subprocess
import sys

import pytest
from helpers import REPO_ROOT
from kio.serial import entity_reader

from bench.fuzz.samples import request_frame, sample_frame, served_versions
from logbus.protocol import codec
from logbus.protocol.frames import MalformedRequestError, parse_request_header

SERVED = served_versions()
PRODUCE, LIST_OFFSETS, METADATA, OFFSET_FETCH = 0, 2, 3, 9
HUGE_VARINT = b"\xff\xff\xff\xff\x0f"  # 2^32 - 1
HUGE_INT32 = struct.pack(">i", 2**31 - 1)


def decode(frame: bytes) -> object:
    api_key, version = struct.unpack_from(">hh", frame)
    header = parse_request_header(frame, codec.is_flexible(api_key, version))
    return codec.decode_request(api_key, version, frame, header.body_offset)


@pytest.mark.parametrize(("api_key", "version"), SERVED)
def test_well_formed_requests_pass_and_decode_as_kio_does(api_key: int, version: int) -> None:
    cls = codec.request_class(api_key, version)
    for width in (0, 1, 3):
        frame = sample_frame(api_key, version, width)
        offset = parse_request_header(frame, codec.is_flexible(api_key, version)).body_offset
        assert decode(frame) == entity_reader(cls)(frame, offset)[0]


def huge_count_at_every_position(api_key: int, version: int) -> list[bytes]:
    """The sample frame with a huge count or length written over each position of its body."""
    frame = sample_frame(api_key, version, 1)
    body = parse_request_header(frame, codec.is_flexible(api_key, version)).body_offset
    huge = HUGE_VARINT if codec.is_flexible(api_key, version) else HUGE_INT32
    return [frame[:at] + huge + frame[at + len(huge):] for at in range(body, len(frame))]


def test_a_huge_count_anywhere_never_reaches_kio() -> None:
    """Run in a child process: a count that slipped through would abort it (SIGABRT), not fail an assert."""
    script = (
        "import sys; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/tests']\n"
        "from test_decode_bounds import SERVED, decode, huge_count_at_every_position\n"
        "from logbus.protocol.frames import MalformedRequestError\n"
        "count = 0\n"
        "for api_key, version in SERVED:\n"
        "    for frame in huge_count_at_every_position(api_key, version):\n"
        "        try:\n"
        "            decode(frame)\n"
        "        except MalformedRequestError:\n"
        "            pass\n"
        "        count += 1\n"
        "print(count)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, REPO_ROOT], capture_output=True, text=True, timeout=240,
                          cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout) > 1000


@pytest.mark.parametrize(("api_key", "version"), SERVED)
def test_the_18_byte_killer_frames_are_refused(api_key: int, version: int) -> None:
    """Some alignments happen to be valid requests (a null string, then an int32); requests without
    fields (ListGroups v0-v3, ApiVersions v0-v2) ignore trailing bytes, as Kafka does."""
    refused = 0
    for frame in killer_frames(api_key, version):
        try:
            decode(frame)
        except MalformedRequestError:
            refused += 1
    has_fields = bool(dataclasses.fields(codec.request_class(api_key, version)))
    assert refused > 0 or not has_fields


def killer_frames(api_key: int, version: int) -> list[bytes]:
    """A short body of huge counts at each alignment: whatever the first fields are, some count
    or length claims gigabytes of a frame of a few bytes."""
    huge = HUGE_VARINT if codec.is_flexible(api_key, version) else HUGE_INT32
    return [request_frame(api_key, version, (huge * 2)[at:at + 7]) for at in range(len(huge))]


NULL_ARRAY_REQUESTS = {  # hand-encoded bodies with the array null (compact count 0)
    "produce-v9-topic_data": (PRODUCE, 9, "topic_data", b"\x00" + struct.pack(">hi", -1, 1000) + b"\x00\x00"),
    "offset_fetch-v8-groups": (OFFSET_FETCH, 8, "groups", b"\x00\x00\x00"),
    "list_offsets-v6-topics": (LIST_OFFSETS, 6, "topics", struct.pack(">ib", -1, 0) + b"\x00\x00"),
}


@pytest.mark.parametrize(("api_key", "version", "name", "body"), NULL_ARRAY_REQUESTS.values(),
                         ids=NULL_ARRAY_REQUESTS.keys())
def test_null_in_a_non_nullable_array_is_refused(api_key: int, version: int, name: str, body: bytes) -> None:
    with pytest.raises(MalformedRequestError, match=f"non-nullable field {name} was serialized as null"):
        decode(request_frame(api_key, version, body))


def test_null_in_a_non_nullable_string_is_refused() -> None:
    """Metadata v12 topic name is nullable (topic ids); CreateTopics v7 topic name is not."""
    topic = b"\x00" + struct.pack(">ih", 1, 1) + b"\x01\x01\x00"  # name null, 1 partition, rf 1, [], [], no tags
    body = b"\x02" + topic + struct.pack(">i", 1000) + b"\x00\x00"
    with pytest.raises(MalformedRequestError, match="non-nullable field name was serialized as null"):
        decode(request_frame(19, 7, body))


def test_null_in_a_nullable_array_is_accepted() -> None:
    """Metadata v1+ topics: null means every topic."""
    frame = request_frame(METADATA, 12, b"\x00\x00\x00\x00")  # topics null, two bools, no tags
    assert decode(frame).topics is None
