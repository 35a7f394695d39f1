"""The one place logbus reaches into kio's private modules.

kio's public API decodes and encodes whole entities; walking a schema field by field (the
tolerant decoder, the bounded pre-scan) needs kio's introspection of its dataclasses and its
per-field readers, which live in private modules (`kio._kio_native`, `kio.serial._introspect`,
`kio.serial._implicit_defaults`). Everything logbus uses from them passes through here, turned
into a small logbus-shaped description (`FieldSchema`), so a kio upgrade that moves them breaks
one module, and tests/test_kio_adapter.py says so loudly.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from kio._kio_native import get_field_reader
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.serial.readers import (
    read_compact_array_length,
    read_int8,
    read_legacy_array_length,
    read_nullable_datetime_i64,
)

Reader = Any  # (buffer, offset) -> (value, size read)

__all__ = (
    "FieldSchema", "Reader", "entity_schema", "read_compact_array_length", "read_int8",
    "read_legacy_array_length",
)

PRIMITIVE, PRIMITIVE_ARRAY, ENTITY, ENTITY_ARRAY = "primitive", "primitive_array", "entity", "entity_array"
_KINDS = {PrimitiveField: PRIMITIVE, PrimitiveTupleField: PRIMITIVE_ARRAY, EntityField: ENTITY,
          EntityTupleField: ENTITY_ARRAY}


@dataclasses.dataclass(frozen=True, slots=True)
class FieldSchema:
    """One field of a kio entity, as the wire sees it."""

    name: str
    kind: str  # PRIMITIVE, PRIMITIVE_ARRAY, ENTITY or ENTITY_ARRAY
    kafka_type: str | None  # "int32", "string", "records", ...; None for entities
    entity: type | None  # the nested entity class (ENTITY, ENTITY_ARRAY)
    nullable: bool  # the field (for arrays: the array itself) may be null in this version
    tag: int | None  # the tag of a tagged field, None for a plain one
    reader: Reader  # kio's reader for the value (tagged fields: as found in the tag section)
    tagged_default: Any  # the value of an absent tagged field

    @property
    def tagged(self) -> bool:
        return self.tag is not None


@cache
def entity_schema(cls: type) -> tuple[FieldSchema, ...]:
    """The fields of kio entity class `cls` in wire order (tagged ones included)."""
    return tuple(_field_schema(cls, field) for field in dataclasses.fields(cls))


def _field_schema(cls: type, field: dataclasses.Field) -> FieldSchema:
    classified = classify_field(field)
    kind = _KINDS[type(classified)]
    is_entity = kind in (ENTITY, ENTITY_ARRAY)
    tag = get_field_tag(field)
    return FieldSchema(
        name=field.name,
        kind=kind,
        kafka_type=None if is_entity else field.metadata["kafka_type"],
        entity=classified.type_ if is_entity else None,
        nullable=_array_nullable(field) if kind in (PRIMITIVE_ARRAY, ENTITY_ARRAY) else is_optional(field),
        tag=None if tag is None else int(tag),
        reader=_reader(cls, field, tag is not None),
        tagged_default=None if tag is None else get_tagged_field_default(field),
    )


def _reader(cls: type, field: dataclasses.Field, tagged: bool) -> Reader:
    """kio's reader for `field`, except that a plain timestamp reads Kafka's -1 ("no time", as in
    DescribeTransactions' start time while no transaction runs) as None, where kio's own reader
    refuses every negative timestamp. Only responses have timestamp fields."""
    if field.metadata.get("kafka_type") == "datetime_i64" and not tagged:
        return read_nullable_datetime_i64
    return get_field_reader(cls, field, False, tagged)


def _array_nullable(field: dataclasses.Field) -> bool:
    """kio's `is_optional` looks inside a tuple (at its items); the array itself is nullable when
    the annotation is `tuple[...] | None`."""
    return get_origin(field.type) in (UnionType, Union) and NoneType in get_args(field.type)
