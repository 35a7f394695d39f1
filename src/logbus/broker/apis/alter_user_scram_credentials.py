"""AlterUserScramCredentials (key 51): serves v0, as Kafka 4.1 advertises it.

Upsertions carry what the client derived (salt, iterations, salted password); the broker keeps
only the stored and server keys made from it. Each user named gets one result; a user with any
refused alteration has none of its alterations applied, as in Kafka's ZkAdminManager:
UNACCEPTABLE_CREDENTIAL for an empty name or iterations outside 4096..16384,
UNSUPPORTED_SASL_MECHANISM for a mechanism other than SCRAM-SHA-256 (1) and SCRAM-SHA-512 (2),
DUPLICATE_RESOURCE for a (user, mechanism) altered twice in the request, RESOURCE_NOT_FOUND for
deleting a credential that does not exist. The accepted users' changes are written together (all
or none): a failed write answers them all with UNKNOWN_SERVER_ERROR and changes nothing.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from ...cluster.metadata import MetadataWriteError
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.scram import (
    MECHANISMS_BY_CODE,
    CredentialChanges,
    UserCredentials,
    credential_from_salted_password,
    iterations_error,
)
from ..context import RequestContext

API_KEY = 51
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    alterations = [*request.deletions, *request.upsertions]
    refused = _refusals(alterations, ctx.broker.metadata.scram_credentials())
    changes: CredentialChanges = {}
    for alteration in alterations:
        if alteration.name not in refused:
            changes.setdefault(alteration.name, {})[MECHANISMS_BY_CODE[alteration.mechanism].name] = \
                _credential(alteration)
    if changes:
        try:
            await ctx.broker.metadata.alter_scram_credentials(changes)
        except MetadataWriteError as exc:
            refused |= dict.fromkeys(changes, exc)
    results = tuple(_result(module, user, refused.get(user)) for user in dict.fromkeys(a.name for a in alterations))
    return make(response_class(API_KEY, ctx.api_version), throttle_time=timedelta(0), results=results)


def _credential(alteration: Any) -> Any:
    """The credential an upsertion sets; None for a deletion."""
    if not hasattr(alteration, "salted_password"):
        return None
    mechanism = MECHANISMS_BY_CODE[alteration.mechanism]
    return credential_from_salted_password(mechanism, alteration.salt, alteration.salted_password,
                                           alteration.iterations)


def _refusals(alterations: list[Any], current: UserCredentials) -> dict[str, KafkaApiError]:
    """The users whose alterations are refused, with the first reason found for each."""
    counts = Counter((a.name, a.mechanism) for a in alterations)
    refused: dict[str, KafkaApiError] = {}
    for alteration in alterations:
        error = _refusal(alteration, counts[(alteration.name, alteration.mechanism)], current)
        if error is not None:
            refused.setdefault(alteration.name, error)
    return refused


def _refusal(alteration: Any, times_altered: int, current: UserCredentials) -> KafkaApiError | None:
    if not alteration.name:
        return KafkaApiError(ErrorCode.unacceptable_credential, "Username must not be empty")
    mechanism = MECHANISMS_BY_CODE.get(alteration.mechanism)
    if mechanism is None:
        return KafkaApiError(ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    if times_altered > 1:
        return KafkaApiError(ErrorCode.duplicate_resource,
                             "A user credential cannot be altered twice in the same request")
    if hasattr(alteration, "iterations"):
        reason = iterations_error(alteration.iterations)
        if reason is not None:
            return KafkaApiError(ErrorCode.unacceptable_credential, reason)
    elif mechanism.name not in current.get(alteration.name, {}):
        return KafkaApiError(ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")
    return None


def _result(module: Any, user: str, error: KafkaApiError | None) -> Any:
    return make(module.AlterUserScramCredentialsResult, user=user,
                error_code=ErrorCode.none if error is None else error.code,
                error_message=None if error is None else error.message)
