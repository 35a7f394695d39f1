"""Any API's response answering every part of a request with one error code (sans-I/O).

Kafka's `AbstractRequest.getErrorResponse`, written once for every API from the kio schemas
instead of once per API: the response mirrors the request's topics, partitions, groups or
resources and carries `code` in every error code field (the top-level one, if the version has
it, and each item's), the message in every `error_message`, and Kafka's "nothing" in the other
fields (-1 for ids, offsets and epochs, empty or null otherwise). The server answers with it a
request whose handler failed (broker/server.py).

A response array mirrors the request array of the same name, else the one request array left
over (Produce's `topic_data` -> `responses`; Fetch's `topics` when `forgotten_topics_data` is
also there); a request array of names or partition indexes (DeleteTopics v0-5 `topic_names`,
ElectLeaders' partitions) gives one item per value; a result array of bare outcomes (CreateAcls)
one per request item. Only arrays whose items carry an error code
are mirrored: the rest (Metadata's brokers, a topic's configs) stay empty. Produce with acks=0
has no response at all (None), as in Kafka.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode

from .kio_adapter import ENTITY, ENTITY_ARRAY, PRIMITIVE_ARRAY, FieldSchema, entity_schema

PRODUCE = 0
NO_TIME = datetime.datetime.fromtimestamp(0, tz=datetime.UTC)
# Fields naming what an item is about, copied from the request item; and the request's names for them.
_IDENTITY_ALIASES: dict[str, tuple[str, ...]] = {
    "name": ("name", "topic", "topic_name"),
    "topic": ("topic", "name", "topic_name"),
    "topic_name": ("topic_name", "topic", "name"),
    "topic_id": ("topic_id",),
    "partition_index": ("partition_index", "partition", "index", "partition_id"),
    "partition": ("partition", "partition_index", "index"),
    "index": ("index", "partition_index", "partition"),
    "partition_id": ("partition_id", "partition_index", "partition"),
    "group_id": ("group_id",),
    "transactional_id": ("transactional_id",),
    "resource_type": ("resource_type",),
    "resource_name": ("resource_name",),
    "member_id": ("member_id",),
    "group_instance_id": ("group_instance_id",),
    "user": ("user", "name"),
    "key": ("key",),
    "producer_id": ("producer_id",),
}
_BLANKS: dict[str, Any] = {
    "bool": False, "int8": -1, "int16": -1, "int32": -1, "int64": -1, "uint16": 0, "float64": 0.0,
    "string": "", "bytes": b"", "records": b"", "uuid": uuid.UUID(int=0),
    "timedelta_i32": datetime.timedelta(0), "timedelta_i64": datetime.timedelta(0), "datetime_i64": NO_TIME,
}


def error_response(api_key: int, response_cls: type, request: Any, code: ErrorCode, message: str | None) -> Any:
    """`response_cls` answering each part of `request` with `code` (None: Produce with acks=0)."""
    if api_key == PRODUCE and request.acks == 0:
        return None
    return _build(response_cls, request, code, message, top_level=True)


def _build(cls: type, source: Any, code: ErrorCode, message: str | None, top_level: bool = False) -> Any:
    """`cls` mirroring request entity `source`; the top level copies no identity field (JoinGroup's
    member id is Kafka's unknown one in an error, not the request's)."""
    values: dict[str, Any] = {}
    arrays = _paired_arrays(cls, None if source is None or isinstance(source, _Named) else type(source))
    has_default = _fields_with_defaults(cls)
    for field in entity_schema(cls):
        if field.kafka_type == "error_code":
            values[field.name] = code
        elif field.name == "error_message":
            values[field.name] = message if message is not None or field.nullable else ""
        elif field.kind == ENTITY_ARRAY:
            items = _source_items(source, arrays.get(field.name, ()))
            values[field.name] = tuple(_build(field.entity, item, code, message) for item in items)
        elif field.name in has_default:
            continue
        elif field.kind == ENTITY:
            values[field.name] = None if field.nullable else _build(field.entity, None, code, message)
        elif field.kind == PRIMITIVE_ARRAY:
            values[field.name] = None if field.nullable else ()
        else:
            values[field.name] = _identity(None if top_level else source, field)
    return cls(**values)


def _identity(source: Any, field: FieldSchema) -> Any:
    """The request item's value for an identity field (a topic name, a partition index...), else
    the field's blank value."""
    blank = None if field.nullable else _BLANKS[field.kafka_type]
    example = _BLANKS[field.kafka_type]
    if isinstance(source, _Named):
        value = source.value
        return value if field.name == source.field and isinstance(value, type(example)) else blank
    for name in _IDENTITY_ALIASES.get(field.name, ()):
        value = getattr(source, name, None)
        if value is not None and isinstance(value, type(example)) and not isinstance(value, bool):
            return value
    return blank


@dataclasses.dataclass(frozen=True, slots=True)
class _Named:
    """An item of a request array of plain values (names, partition indexes): the value, and the
    response item's field it fills."""

    field: str
    value: Any


_Source = tuple[str, str | None, str | None]  # request array, plain value's field, array inside its items


def _source_items(source: Any, paired: tuple[_Source, ...]) -> tuple[Any, ...]:
    """The request items a response array mirrors, the paired request arrays' one after another."""
    items: list[Any] = []
    for name, target_field, inner in paired if source is not None else ():
        values = getattr(source, name, None) or ()
        if inner is not None:
            values = [nested for value in values for nested in getattr(value, inner, None) or ()]
        items.extend(values if target_field is None else (_Named(target_field, value) for value in values))
    return tuple(items)


@cache
def _paired_arrays(cls: type, source_cls: type | None) -> dict[str, tuple[_Source, ...]]:
    """Response array name -> its request arrays, each with the item field a plain value fills
    (None for an entity array), and the array inside their items it mirrors instead, if any
    (AlterReplicaLogDirs: the topics of every dir). Only response arrays whose items carry an error code take part;
    one left without a namesake takes every leftover request array about the same subject
    (AlterUserScramCredentials: deletions, then upsertions), or only `topics` where there is one
    (Fetch: not its forgotten topics)."""
    if source_cls is None:
        return {}
    wanted = [f for f in entity_schema(cls) if f.kind == ENTITY_ARRAY and _carries_error_code(f.entity)]
    offered = {f.name: f for f in entity_schema(source_cls) if f.kind in (ENTITY_ARRAY, PRIMITIVE_ARRAY)}
    pairs: dict[str, list[str]] = {f.name: [f.name] for f in wanted if f.name in offered}
    left = [f for f in wanted if f.name not in pairs]
    if len(left) == 1:
        spare = [name for name in offered if name not in pairs and _same_subject(left[0], offered[name])]
        pairs[left[0].name] = ["topics"] if "topics" in spare else spare
    result: dict[str, tuple[_Source, ...]] = {}
    for target in wanted:
        sources: list[_Source] = []
        for name in pairs.get(target.name, ()):
            if offered[name].kind == ENTITY_ARRAY:
                sources.append((name, None, None))
            elif (field := _plain_value_field(target.entity, offered[name].kafka_type)) is not None:
                sources.append((name, field, None))
        if not sources and target in left:
            sources = [(name, None, inner.name) for name, outer in offered.items() if outer.kind == ENTITY_ARRAY
                       for inner in entity_schema(outer.entity)
                       if inner.kind == ENTITY_ARRAY and _same_subject(target, inner)][:1]
        result[target.name] = tuple(sources)
    return result


def _same_subject(target: FieldSchema, source: FieldSchema) -> bool:
    """Whether items of the two arrays are about the same thing: an identity field in common (a
    DescribeLogDirs result is a log dir, not the topic the request names), or a result that is
    nothing but an outcome (CreateAcls: one per creation, in order)."""
    if source.kind == PRIMITIVE_ARRAY:
        return True  # _plain_value_field decides
    if {f.name for f in entity_schema(target.entity) if f.kind != ENTITY_ARRAY} <= {"error_code", "error_message"}:
        return True
    target_names = {f.name for f in entity_schema(target.entity)} & _IDENTITY_ALIASES.keys()
    source_names = {f.name for f in entity_schema(source.entity)}
    return any(source_names & set(_IDENTITY_ALIASES[name]) for name in target_names)


def _plain_value_field(cls: type, kafka_type: str | None) -> str | None:
    """The first identity field of `cls` of type `kafka_type`: what a plain request value names."""
    for field in entity_schema(cls):
        if field.kind not in (ENTITY, ENTITY_ARRAY) and field.name in _IDENTITY_ALIASES \
                and field.kafka_type == kafka_type:
            return field.name
    return None


@cache
def _carries_error_code(cls: type) -> bool:
    return any(f.kafka_type == "error_code" or (f.kind in (ENTITY, ENTITY_ARRAY) and _carries_error_code(f.entity))
               for f in entity_schema(cls))


@cache
def _fields_with_defaults(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls)
                     if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING)
