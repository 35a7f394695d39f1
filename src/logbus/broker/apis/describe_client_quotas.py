"""DescribeClientQuotas (key 48): serves v0–v1, as Kafka 4.1 advertises it.

The filter's components match entity types: match_type 0 an exact name, 1 the default entity,
2 any entity of that type (the default included); `strict` leaves out entities with other types.
A bad filter answers INVALID_REQUEST for the whole request (an empty entity type, a type named
twice, an unknown match type, an exact match without a name, ip combined with user or client-id)
or UNSUPPORTED_VERSION for an entity type other than user, client-id and ip, as Kafka's
ClientQuotasImage.describe. An ip filter finds the ip entities (connection_creation_rate), which
are never combined with a user or client id.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.quotas import CLIENT_ID, DEFAULT, IP, USER, QuotaEntity
from ..context import RequestContext

API_KEY = 48
MIN_VERSION = 0
MAX_VERSION = 1

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
ANY = object()  # a type match: any name, the default included


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    try:
        wanted = _filter(request.components)
    except KafkaApiError as exc:
        return make(response_class(API_KEY, ctx.api_version), error_code=exc.code, error_message=exc.message,
                    entries=None)
    found = sorted(ctx.broker.metadata.client_quotas().items(), key=lambda item: item[0].path())
    entries = tuple(_entry(module, entity, values) for entity, values in found
                    if _matches(entity, wanted, request.strict))
    return make(response_class(API_KEY, ctx.api_version), error_code=ErrorCode.none, error_message=None,
                entries=entries)


def _filter(components: Any) -> dict[str, object]:
    """Entity type -> the name it must have (DEFAULT for the default entity) or ANY."""
    wanted: dict[str, object] = {}
    for component in components:
        kind = component.entity_type
        if not kind:
            raise KafkaApiError(ErrorCode.invalid_request, "Invalid empty entity type.")
        if kind in wanted:
            raise KafkaApiError(ErrorCode.invalid_request, f"Entity type {kind} cannot appear more than once in the "
                                                           "filter.")
        if kind not in (USER, CLIENT_ID, IP):
            raise KafkaApiError(ErrorCode.unsupported_version, f"Unsupported entity type {kind}")
        wanted[kind] = _match(component)
    if IP in wanted and (USER in wanted or CLIENT_ID in wanted):
        raise KafkaApiError(ErrorCode.invalid_request, "Invalid entity filter component combination. IP filter "
                                                       "component should not be used with user or clientId filter "
                                                       "component.")
    return wanted


def _match(component: Any) -> object:
    if component.match_type == MATCH_EXACT:
        if component.match is None:
            raise KafkaApiError(ErrorCode.invalid_request, "Unexpected null match for an exact match")
        return component.match
    if component.match_type == MATCH_DEFAULT:
        return DEFAULT
    if component.match_type == MATCH_SPECIFIED:
        return ANY
    raise KafkaApiError(ErrorCode.invalid_request, f"Unexpected match type: {component.match_type}")


def _matches(entity: QuotaEntity, wanted: dict[str, object], strict: bool) -> bool:
    names = {USER: entity.user, CLIENT_ID: entity.client_id, IP: entity.ip}
    present = {kind for kind, name in names.items() if name is not None}
    if strict and present != set(wanted):
        return False
    return all(names.get(kind) is not None and (match is ANY or names[kind] == match)
               for kind, match in wanted.items())


def _entry(module: Any, entity: QuotaEntity, values: dict[str, float]) -> Any:
    return make(module.EntryData,
                entity=tuple(make(module.EntityData, entity_type=kind, entity_name=name)
                             for kind, name in entity.parts()),
                values=tuple(make(module.ValueData, key=key, value=value) for key, value in sorted(values.items())))
