"""AlterClientQuotas (key 49): serves v0–v1, as Kafka 4.1 advertises it.

Each entry names an entity (user, client-id or both, or an ip alone; a null name is the default
entity) and sets or removes quota keys. Refusals per entry, as Kafka's ClientQuotaControlManager
answers them: INVALID_REQUEST for an empty entity, an entity type named twice, an empty name, ip
combined with another type, an ip name that is not an IP address, a key named twice, an entity
altered twice (later entries), a key the entity type does not take (an ip takes only
connection_creation_rate, users and client ids all but it), a value not above 0, a fractional
byte or connection rate; UNSUPPORTED_VERSION for an entity type other than user, client-id and
ip. Kafka also takes a host name for an ip and resolves it; logbus takes only addresses (no DNS
lookup while answering a request). Removing a key that is not set is no error. `validate_only`
checks and writes nothing. The accepted entries are written together (all or none) through the
metadata store, then applied; a failed write answers them all with UNKNOWN_SERVER_ERROR and
changes nothing.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...cluster.metadata import MetadataWriteError
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.connection_quotas import parse_ip
from ...security.quotas import CLIENT_ID, DEFAULT, IP, USER, QuotaChanges, QuotaEntity, quota_value_error
from ..context import RequestContext

API_KEY = 49
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    errors: dict[int, KafkaApiError] = {}
    changes: QuotaChanges = {}
    owners: dict[QuotaEntity, int] = {}
    for i, entry in enumerate(request.entries):
        try:
            entity = _entity(entry.entity)
            if entity in owners:
                raise KafkaApiError(ErrorCode.invalid_request, f"Ignoring duplicate entity {_describe(entity)}")
            owners[entity] = i
            changes[entity] = _ops(entry.ops, entity)
        except KafkaApiError as exc:
            errors[i] = exc
    if changes and not request.validate_only:
        try:
            await ctx.broker.metadata.alter_client_quotas(changes)
        except MetadataWriteError as exc:
            errors |= dict.fromkeys((owners[entity] for entity in changes), exc)
    entries = tuple(_result(module, entry, errors.get(i)) for i, entry in enumerate(request.entries))
    return make(response_class(API_KEY, ctx.api_version), entries=entries)


def _entity(parts: Any) -> QuotaEntity:
    """The entity an entry names (KafkaApiError when Kafka would refuse it)."""
    if not parts:
        raise KafkaApiError(ErrorCode.invalid_request, "Invalid empty client quota entity")
    names: dict[str, str] = {}
    for part in parts:
        if part.entity_type in names:
            raise KafkaApiError(ErrorCode.invalid_request,
                                f"Invalid empty client quota entity, duplicate entity entry {part.entity_type}")
        if part.entity_type not in (USER, CLIENT_ID, IP):
            raise KafkaApiError(ErrorCode.unsupported_version,
                                f"Unhandled client quota entity type: {part.entity_type}")
        if part.entity_name is not None and not part.entity_name:
            raise KafkaApiError(ErrorCode.invalid_request, f"Empty {part.entity_type} not supported")
        names[part.entity_type] = DEFAULT if part.entity_name is None else part.entity_name
    if IP in names:
        if len(names) > 1:
            raise KafkaApiError(ErrorCode.invalid_request,
                                "Invalid quota entity combination, IP quota should not be combined with User or "
                                "ClientId")
        if names[IP] != DEFAULT and parse_ip(names[IP]) is None:
            raise KafkaApiError(ErrorCode.invalid_request, f"{names[IP]} is not a valid IP or resolvable host.")
        return QuotaEntity(ip=names[IP])
    return QuotaEntity(names.get(USER), names.get(CLIENT_ID))


def _ops(ops: Any, entity: QuotaEntity) -> dict[str, float | None]:
    """Key -> new value, or None to remove it."""
    values: dict[str, float | None] = {}
    for op in ops:
        if op.key in values:
            raise KafkaApiError(ErrorCode.invalid_request, f"Duplicate quota key {op.key} not updating quota for "
                                                           f"this entity {_describe(entity)}")
        if not op.remove:
            reason = quota_value_error(op.key, op.value, entity.keys)
            if reason is not None:
                raise KafkaApiError(ErrorCode.invalid_request, reason)
        values[op.key] = None if op.remove else float(op.value)
    return values


def _describe(entity: QuotaEntity) -> str:
    return "ClientQuotaEntity(entries={" + ", ".join(f"{kind}={name}" for kind, name in entity.parts()) + "})"


def _result(module: Any, entry: Any, error: KafkaApiError | None) -> Any:
    entity = tuple(make(module.EntityData, entity_type=part.entity_type, entity_name=part.entity_name)
                   for part in entry.entity)
    return make(module.EntryData, error_code=ErrorCode.none if error is None else error.code,
                error_message=None if error is None else error.message, entity=entity)
