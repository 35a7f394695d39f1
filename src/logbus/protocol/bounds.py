"""A bounded pre-scan of a request body, run before kio decodes it.

kio's native decoder trusts the counts it reads: an 18-byte request whose compact array claims
2^32 items makes it reserve that many slots, and the process aborts. Kafka's generated parsers
refuse such a request ("Tried to allocate a collection of size N, but there are only M bytes
remaining") and so does this scan: it walks the request schema of (API key, version), the same
kio dataclasses the decoder uses, and checks every array count, string, bytes and records length,
and every tagged field's size, against the bytes left in the frame. It also refuses a null where
the schema does not allow one (Kafka: "non-nullable field X was serialized as null"), so handlers
only see what the schema promises. After it passes, nothing kio allocates can exceed a small
multiple of the frame size.

The walk builds no values: each entity class compiles once into a list of skip functions
(`(buffer, offset) -> offset after the field`), so a produce request costs a few microseconds.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache

from .frames import MalformedRequestError
from .kio_adapter import ENTITY, ENTITY_ARRAY, PRIMITIVE, PRIMITIVE_ARRAY, FieldSchema, entity_schema

Skip = Callable[[bytes, int], int]  # (buffer, offset) -> offset after the value

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

FIXED_SIZES = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
    "timedelta_i32": 4, "int64": 8, "uint64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8,
    "uuid": 16,
}
_LENGTH_PREFIXED = {"string": _INT16, "bytes": _INT32, "records": _INT32}  # legacy length width


def check_request(cls: type, buffer: bytes, offset: int) -> None:
    """Raise MalformedRequestError unless the body of kio request class `cls` at `offset` fits
    the frame and has no null where the schema forbids one."""
    try:
        _entity_skipper(cls)(buffer, offset)
    except MalformedRequestError:
        raise
    except (struct.error, IndexError):
        raise MalformedRequestError(f"{cls.__name__} runs past the end of the frame") from None


# ---------------------------------------------------------------------------- primitives


def _uvarint(buffer: bytes, offset: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (Kafka's limit for 32-bit values)."""
    byte = buffer[offset]
    if byte < 0x80:
        return byte, offset + 1
    result = byte & 0x7F
    for shift in (7, 14, 21, 28):
        offset += 1
        byte = buffer[offset]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, offset + 1
    raise MalformedRequestError("unsigned varint longer than 5 bytes")


def _past_end(what: str, needed: int, buffer: bytes, offset: int) -> MalformedRequestError:
    return MalformedRequestError(f"{what} needs {needed} bytes, only {len(buffer) - offset} remain")


def _null(name: str) -> MalformedRequestError:
    return MalformedRequestError(f"non-nullable field {name} was serialized as null")


def _fixed_skipper(size: int, name: str) -> Skip:
    def skip(buffer: bytes, offset: int) -> int:
        end = offset + size
        if end > len(buffer):
            raise _past_end(name, size, buffer, offset)
        return end

    return skip


def _sized_skipper(name: str, kafka_type: str, nullable: bool, flexible: bool) -> Skip:
    """string, bytes, records: a length (compact: uvarint length + 1, 0 = null; legacy: int16
    for strings, int32 otherwise, -1 = null), then that many bytes."""
    if flexible:
        def skip(buffer: bytes, offset: int) -> int:
            length, offset = _uvarint(buffer, offset)
            if length == 0:
                if nullable:
                    return offset
                raise _null(name)
            end = offset + length - 1
            if end > len(buffer):
                raise _past_end(name, length - 1, buffer, offset)
            return end

        return skip

    prefix = _LENGTH_PREFIXED[kafka_type]
    unpack, width = prefix.unpack_from, prefix.size

    def skip_legacy(buffer: bytes, offset: int) -> int:
        (length,) = unpack(buffer, offset)
        offset += width
        if length < 0:
            if nullable and length == -1:
                return offset
            raise _null(name) if length == -1 else MalformedRequestError(f"{name} has length {length}")
        end = offset + length
        if end > len(buffer):
            raise _past_end(name, length, buffer, offset)
        return end

    return skip_legacy


def _primitive_skipper(field: FieldSchema, flexible: bool) -> Skip:
    kafka_type = field.kafka_type
    if kafka_type in FIXED_SIZES:
        return _fixed_skipper(FIXED_SIZES[kafka_type], field.name)
    if kafka_type in _LENGTH_PREFIXED:
        return _sized_skipper(field.name, kafka_type, field.nullable, flexible)
    raise TypeError(f"no bounds rule for kafka type {kafka_type!r} (field {field.name})")


# ---------------------------------------------------------------------------- arrays and entities


def _array_skipper(field: FieldSchema, item: Skip, item_size: int | None, flexible: bool) -> Skip:
    """A count (compact: uvarint count + 1, 0 = null; legacy: int32, -1 = null), then the items.
    A count larger than the bytes left is refused before any item is read, as Kafka does."""
    name, nullable = field.name, field.nullable

    def skip(buffer: bytes, offset: int) -> int:
        if flexible:
            count, offset = _uvarint(buffer, offset)
            count -= 1
        else:
            (count,) = _INT32.unpack_from(buffer, offset)
            offset += 4
        if count < 0:
            if nullable and count == -1:
                return offset
            raise _null(name) if count == -1 else MalformedRequestError(f"{name} has {count} items")
        remaining = len(buffer) - offset
        if count > remaining:
            raise MalformedRequestError(
                f"tried to allocate a collection of size {count} for {name}, but there are only "
                f"{remaining} bytes remaining"
            )
        if item_size is not None:
            end = offset + count * item_size
            if end > len(buffer):
                raise _past_end(name, count * item_size, buffer, offset)
            return end
        for _ in range(count):
            offset = item(buffer, offset)
        return offset

    return skip


def _nullable_entity_skipper(entity: Skip) -> Skip:
    """KIP-893 nullable struct: an int8 marker (-1 null, 1 present) before the entity."""

    def skip(buffer: bytes, offset: int) -> int:
        (marker,) = _INT8.unpack_from(buffer, offset)
        return offset + 1 if marker < 0 else entity(buffer, offset + 1)

    return skip


def _field_skipper(field: FieldSchema, flexible: bool) -> Skip:
    if field.kind == ENTITY:
        entity = _entity_skipper(field.entity)
        return _nullable_entity_skipper(entity) if field.nullable else entity
    if field.kind == ENTITY_ARRAY:
        return _array_skipper(field, _entity_skipper(field.entity), None, flexible)
    if field.kind == PRIMITIVE_ARRAY:
        item_field = dataclasses.replace(field, name=field.name + "[]", kind=PRIMITIVE, nullable=False)
        item_size = FIXED_SIZES.get(field.kafka_type)
        item = _primitive_skipper(item_field, flexible)
        return _array_skipper(field, item, item_size, flexible)
    return _primitive_skipper(field, flexible)


def _merge_fixed(fields: list[FieldSchema], flexible: bool) -> tuple[Skip, ...]:
    """Skippers for `fields` in order, each run of fixed-size fields checked at once."""
    skippers: list[Skip] = []
    run: list[str] = []
    run_size = 0
    for field in fields:
        size = FIXED_SIZES.get(field.kafka_type) if field.kind == PRIMITIVE else None
        if size is not None:
            run.append(field.name)
            run_size += size
            continue
        if run:
            skippers.append(_fixed_skipper(run_size, "+".join(run)))
            run, run_size = [], 0
        skippers.append(_field_skipper(field, flexible))
    if run:
        skippers.append(_fixed_skipper(run_size, "+".join(run)))
    return tuple(skippers)


@cache
def _entity_skipper(cls: type) -> Skip:
    """The compiled walk of one entity class: its plain fields in order, then (flexible versions)
    its tagged-field section, where known tags are walked within their declared size and unknown
    ones skipped."""
    flexible = bool(cls.__flexible__)
    schema = entity_schema(cls)
    plain = _merge_fixed([field for field in schema if not field.tagged], flexible)
    tagged = {field.tag: _field_skipper(field, flexible) for field in schema if field.tagged}
    name = cls.__name__

    if not flexible:
        def skip_entity(buffer: bytes, offset: int) -> int:
            for skip in plain:
                offset = skip(buffer, offset)
            return offset

        return skip_entity

    def skip_flexible_entity(buffer: bytes, offset: int) -> int:
        for skip in plain:
            offset = skip(buffer, offset)
        if buffer[offset] == 0:  # no tagged fields, the common case
            return offset + 1
        count, offset = _uvarint(buffer, offset)
        for _ in range(count):
            tag, offset = _uvarint(buffer, offset)
            size, offset = _uvarint(buffer, offset)
            end = offset + size
            if end > len(buffer):
                raise _past_end(f"tagged field {tag} of {name}", size, buffer, offset)
            known = tagged.get(tag)
            if known is not None:
                known(memoryview(buffer)[:end], offset)  # the value must fit in its declared size
            offset = end
        return offset

    return skip_flexible_entity
