"""Typed request and response bodies through kio, built lazily per (API, version).

Requests decode with kio's native readers. kio rejects unknown tagged fields, which the
protocol says to ignore; such a request is decoded again by `tolerant.decode`, which skips
them. Responses encode into a list of chunks: kio's writers only call `.write`, so record
blobs are appended as they are instead of being copied into one buffer.
"""

from __future__ import annotations

import dataclasses
import datetime
from functools import cache
from typing import Any

from kio.index import load_payload_module
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from . import bounds, tolerant
from .frames import MalformedRequestError

NO_THROTTLE = datetime.timedelta(0)


class ChunkSink(list):
    """A write-only file whose writes are kept as chunks."""

    write = list.append


@cache
def request_class(api_key: int, version: int) -> type:
    return load_payload_module(api_key, version, EntityType.request).__dict__[
        _payload_name(api_key, version, EntityType.request)
    ]


@cache
def response_class(api_key: int, version: int) -> type:
    return load_payload_module(api_key, version, EntityType.response).__dict__[
        _payload_name(api_key, version, EntityType.response)
    ]


def _payload_name(api_key: int, version: int, entity_type: EntityType) -> str:
    module = load_payload_module(api_key, version, entity_type)
    for name, value in vars(module).items():
        if isinstance(value, type) and getattr(value, "__type__", None) is entity_type:
            return name
    raise LookupError(f"no {entity_type.name} class for api {api_key} v{version}")


@cache
def response_module(api_key: int, version: int) -> Any:
    """The kio module of a response version; its nested classes are attributes of it."""
    return load_payload_module(api_key, version, EntityType.response)


@cache
def request_module(api_key: int, version: int) -> Any:
    """The kio module of a request version; its nested classes are attributes of it."""
    return load_payload_module(api_key, version, EntityType.request)


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def make(cls: type, **fields: Any) -> Any:
    """Build a kio entity from the fields it has in this version; others are dropped.

    Handlers describe a response once, with every field any version carries, and each
    version keeps what it knows.
    """
    names = _field_names(cls)
    if "throttle_time" in names and "throttle_time" not in fields:
        fields["throttle_time"] = NO_THROTTLE
    return cls(**{name: value for name, value in fields.items() if name in names})


def is_flexible(api_key: int, version: int) -> bool:
    return bool(request_class(api_key, version).__flexible__)


@cache
def _reader(cls: type) -> Any:
    return entity_reader(cls)


@cache
def _writer(cls: type) -> Any:
    return entity_writer(cls)


def decode_request(api_key: int, version: int, frame: bytes, offset: int) -> Any:
    """The request body at `offset`; MalformedRequestError when it does not decode, or claims
    more than the frame holds, or has a null the schema forbids (`bounds`).

    kio's native reader refuses an unknown tagged field with a KeyError naming it; only then
    is the frame decoded again, more slowly, by `tolerant.decode`, which skips such fields.
    """
    cls = request_class(api_key, version)
    bounds.check_request(cls, frame, offset)  # before kio allocates what the counts claim
    try:
        value, _size = _reader(cls)(frame, offset)
        return value
    except KeyError as exc:
        if "tagged field" not in str(exc):
            raise MalformedRequestError(f"cannot decode {cls.__name__}: {exc}") from None
    except Exception as exc:
        raise MalformedRequestError(f"cannot decode {cls.__name__}: {exc}") from None
    return tolerant.decode(cls, frame, offset)


def encode(entity: Any) -> list[bytes]:
    sink = ChunkSink()
    _writer(type(entity))(sink, entity)
    return sink
