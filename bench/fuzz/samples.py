"""Well-formed request frames for every API and version the broker serves: fuzz seeds and test inputs.

Each request is built from its kio schema, every field filled (arrays with `width` items, strings
and bytes non-empty, nullable fields present), and encoded by kio's own writer, so a seed is what
a real client of that version could send.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from typing import Any

from logbus.broker.apis import registry
from logbus.protocol import codec
from logbus.protocol.kio_adapter import ENTITY, ENTITY_ARRAY, PRIMITIVE_ARRAY, FieldSchema, entity_schema

_PRIMITIVES: dict[str, Any] = {
    "bool": True, "int8": 1, "int16": 1, "uint16": 1, "int32": 1, "int64": 1, "float64": 1.5,
    "string": "s", "bytes": b"xy", "records": b"records", "uuid": uuid.UUID(int=7),
    "timedelta_i32": datetime.timedelta(milliseconds=5), "timedelta_i64": datetime.timedelta(milliseconds=5),
}


def served_versions() -> list[tuple[int, int]]:
    """Every (API key, version) the broker decodes."""
    return [(spec.key, version) for spec in sorted(registry().values(), key=lambda spec: spec.key)
            for version in range(spec.min_served, spec.max_version + 1)]


def sample_entity(cls: type, width: int = 2) -> Any:
    """An instance of kio entity class `cls` with every field set."""
    return cls(**{field.name: _sample_value(field, width) for field in entity_schema(cls)})


def _sample_value(field: FieldSchema, width: int) -> Any:
    if field.kind == ENTITY:
        return sample_entity(field.entity, width)
    if field.kind == ENTITY_ARRAY:
        return tuple(sample_entity(field.entity, width) for _ in range(width))
    value = _PRIMITIVES[field.kafka_type]
    return tuple(value for _ in range(width)) if field.kind == PRIMITIVE_ARRAY else value


def request_frame(api_key: int, version: int, body: bytes, correlation_id: int = 1) -> bytes:
    """A request frame (without its size prefix): header v1, or v2 for flexible versions."""
    client_id = b"fuzz"
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    return header + (b"\x00" if codec.is_flexible(api_key, version) else b"") + body


def sample_frame(api_key: int, version: int, width: int = 2) -> bytes:
    body = b"".join(codec.encode(sample_entity(codec.request_class(api_key, version), width)))
    return request_frame(api_key, version, body)
