"""protocol/kio_adapter.py is the only module importing kio's private internals; these tests fail
loudly, naming what changed, when a kio upgrade moves or reshapes them."""

from __future__ import annotations

import ast
import dataclasses
import pathlib

import pytest
from helpers import REPO_ROOT
from kio.serial import entity_reader

from bench.fuzz.samples import sample_frame, served_versions
from logbus.protocol import codec, kio_adapter, tolerant
from logbus.protocol.frames import parse_request_header
from logbus.protocol.kio_adapter import ENTITY, ENTITY_ARRAY, PRIMITIVE, PRIMITIVE_ARRAY, entity_schema

SRC = pathlib.Path(REPO_ROOT) / "src" / "logbus"


def private_kio_imports(path: pathlib.Path) -> list[str]:
    """Modules under `kio` with a private (underscore) component that `path` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else (
            [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
        found += [name for name in names
                  if name.split(".")[0] == "kio" and any(part.startswith("_") for part in name.split("."))]
    return found


def test_only_the_adapter_imports_private_kio_modules() -> None:
    offenders = {str(path.relative_to(SRC)): private_kio_imports(path) for path in SRC.rglob("*.py")
                 if path.name != "kio_adapter.py" and private_kio_imports(path)}
    assert offenders == {}


def all_entity_classes() -> set[type]:
    """Every request class the broker serves and every entity nested in one."""
    pending = [codec.request_class(api_key, version) for api_key, version in served_versions()]
    seen: set[type] = set()
    while pending:
        cls = pending.pop()
        if cls in seen:
            continue
        seen.add(cls)
        pending += [field.entity for field in entity_schema(cls) if field.entity is not None]
    return seen


def test_the_schema_of_every_served_request_is_described() -> None:
    """kio's introspection (classify_field, is_optional, get_field_tag), its field readers and its
    tagged-field defaults still work, and agree with the dataclasses, for every entity served."""
    for cls in all_entity_classes():
        schema = entity_schema(cls)
        assert [field.name for field in schema] == [field.name for field in dataclasses.fields(cls)]
        for field in schema:
            assert field.kind in (PRIMITIVE, PRIMITIVE_ARRAY, ENTITY, ENTITY_ARRAY), field
            assert (field.entity is not None) == (field.kind in (ENTITY, ENTITY_ARRAY)), field
            assert (field.kafka_type is None) == (field.entity is not None), field
            assert callable(field.reader), field
            if field.tagged:
                assert field.tagged_default is not dataclasses.MISSING, field


def test_array_nullability_follows_the_version() -> None:
    """Metadata topics became nullable in v1 (null = every topic)."""
    def topics(version: int) -> kio_adapter.FieldSchema:
        return next(field for field in entity_schema(codec.request_class(3, version)) if field.name == "topics")

    assert not topics(0).nullable
    assert topics(1).nullable and topics(12).nullable


def test_the_native_length_readers_behave_as_the_adapter_expects() -> None:
    assert kio_adapter.read_compact_array_length(b"\x00", 0) == (None, 1)
    assert kio_adapter.read_compact_array_length(b"\x03", 0) == (2, 1)
    assert kio_adapter.read_legacy_array_length(b"\xff\xff\xff\xff", 0) == (-1, 4)
    assert kio_adapter.read_int8(b"\xff", 0) == (-1, 1)


@pytest.mark.parametrize(("api_key", "version"), served_versions())
def test_the_tolerant_decoder_agrees_with_kio(api_key: int, version: int) -> None:
    frame = sample_frame(api_key, version, 2)
    offset = parse_request_header(frame, codec.is_flexible(api_key, version)).body_offset
    cls = codec.request_class(api_key, version)
    assert tolerant.decode(cls, frame, offset) == entity_reader(cls)(frame, offset)[0]
