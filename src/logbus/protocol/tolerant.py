"""A request decoder that ignores unknown tagged fields, as the Kafka protocol requires.

kio's native reader raises on a tag its schema does not know (KIP-482 says a receiver skips
them: newer clients may send tags this broker's schema version predates). `decode` walks the
same kio dataclasses in Python: plain fields through kio's per-field readers, nested entities
recursively, and each entity's tagged-field section by hand, keeping known tags and skipping
the rest by their declared size. It is slower than the native reader, so `codec` uses it only
for requests the native reader refused, and `logbus.client` only for such responses (an
unknown tag from a newer broker, or a timestamp of -1, which kio refuses and `kio_adapter`
reads as None).
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

from .frames import MalformedRequestError, read_uvarint
from .kio_adapter import (
    ENTITY,
    ENTITY_ARRAY,
    FieldSchema,
    entity_schema,
    read_compact_array_length,
    read_int8,
    read_legacy_array_length,
)

FieldDecoder = Any  # (buffer, offset) -> (value, offset after it)


def decode(cls: type, buffer: bytes, offset: int) -> Any:
    """Decode entity `cls` at `offset`; unknown tagged fields (at any depth) are skipped."""
    try:
        value, _end = _entity_decoder(cls)(buffer, offset)
    except MalformedRequestError:
        raise
    except Exception as exc:
        raise MalformedRequestError(f"cannot decode {cls.__name__}: {exc}") from None
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class _EntityLayout:
    cls: type
    flexible: bool
    fields: tuple[tuple[str, FieldDecoder], ...]  # in wire order
    tagged: dict[int, tuple[str, Any]]  # tag -> (field name, kio reader)
    tagged_defaults: dict[str, Any]

    def __call__(self, buffer: bytes, offset: int) -> tuple[Any, int]:
        values: dict[str, Any] = {}
        for name, decode_field in self.fields:
            values[name], offset = decode_field(buffer, offset)
        if self.flexible:
            values.update(self.tagged_defaults)
            offset = self._read_tagged(buffer, offset, values)
        return self.cls(**values), offset

    def _read_tagged(self, buffer: bytes, offset: int, values: dict[str, Any]) -> int:
        count, offset = read_uvarint(buffer, offset)
        for _ in range(count):
            tag, offset = read_uvarint(buffer, offset)
            size, offset = read_uvarint(buffer, offset)
            if offset + size > len(buffer):
                raise MalformedRequestError(f"tagged field {tag} runs past the frame")
            known = self.tagged.get(tag)
            if known is not None:
                name, reader = known
                values[name], _used = reader(buffer, offset)
            offset += size
        return offset


@cache
def _entity_decoder(cls: type) -> _EntityLayout:
    flexible = bool(cls.__flexible__)
    plain: list[tuple[str, FieldDecoder]] = []
    tagged: dict[int, tuple[str, Any]] = {}
    defaults: dict[str, Any] = {}
    for field in entity_schema(cls):
        if field.tagged:
            tagged[field.tag] = (field.name, field.reader)
            defaults[field.name] = field.tagged_default
        else:
            plain.append((field.name, _field_decoder(field, flexible)))
    return _EntityLayout(cls, flexible, tuple(plain), tagged, defaults)


def _field_decoder(field: FieldSchema, flexible: bool) -> FieldDecoder:
    """Nested entities decode through this module (they may carry unknown tags too)."""
    if field.kind == ENTITY_ARRAY:
        return _array_decoder(field.entity, flexible)
    if field.kind == ENTITY:
        return _nullable_decoder(field.entity) if field.nullable else _entity_decoder(field.entity)
    return _advancing(field.reader)


def _advancing(reader: Any) -> FieldDecoder:
    """kio readers return (value, size); the decoders here return (value, next offset)."""

    def decode_field(buffer: bytes, offset: int) -> tuple[Any, int]:
        value, size = reader(buffer, offset)
        return value, offset + size

    return decode_field


def _array_decoder(item_cls: type, flexible: bool) -> FieldDecoder:
    def decode_array(buffer: bytes, offset: int) -> tuple[tuple | None, int]:
        if flexible:
            length, used = read_compact_array_length(buffer, offset)
        else:
            length, used = read_legacy_array_length(buffer, offset)
            length = None if length < 0 else length
        offset += used
        if length is None:
            return None, offset
        items = []
        item_decoder = _entity_decoder(item_cls)
        for _ in range(length):
            item, offset = item_decoder(buffer, offset)
            items.append(item)
        return tuple(items), offset

    return decode_array


def _nullable_decoder(item_cls: type) -> FieldDecoder:
    """KIP-893 nullable struct: an int8 marker (-1 null, 1 present) before the entity."""

    def decode_nullable(buffer: bytes, offset: int) -> tuple[Any, int]:
        marker, used = read_int8(buffer, offset)
        offset += used
        if marker < 0:
            return None, offset
        return _entity_decoder(item_cls)(buffer, offset)

    return decode_nullable
