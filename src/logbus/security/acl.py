"""ACLs and the authorizer, with Kafka's codes and rules (sans-I/O).

An ACL binding is a resource pattern (resource type, name, LITERAL or PREFIXED) and an access
control entry (principal, host, operation, ALLOW or DENY). `Authorizer.authorize` decides as
Kafka's AclAuthorizer and StandardAuthorizer do:

1. a super user (`super.users`, exact principals) may do everything;
2. the ACLs that apply to a resource are those whose pattern matches its name: LITERAL equal
   to it, LITERAL `*` (any name), PREFIXED a prefix of it;
3. with no such ACL at all (for any principal) the answer is `allow.everyone.if.no.acl.found`;
4. a matching DENY for the principal (or `User:*`), host (or `*`) and operation (or All) wins;
5. else a matching ALLOW decides, where Read, Write, Delete and Alter imply Describe and
   AlterConfigs implies DescribeConfigs (implication only widens ALLOW, never DENY).

Metadata, DescribeCluster and DescribeGroups report "authorized operations" as a bitfield of
operation codes (bit n set = operation n allowed); INT32_MIN means "not requested".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from ..errors import InvalidAclError
from .principal import KafkaPrincipal

CLUSTER_NAME = "kafka-cluster"
WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"
NOT_REQUESTED = -(2**31)


class ResourceType(IntEnum):
    """org.apache.kafka.common.resource.ResourceType codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


# How Kafka spells resource types in ZooKeeper paths and kafka-acls output.
RESOURCE_TYPE_NAMES = {
    ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group", ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId", ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}


class PatternType(IntEnum):
    """org.apache.kafka.common.resource.PatternType codes; ANY and MATCH exist only in filters."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    """org.apache.kafka.common.acl.AclOperation codes; ANY exists only in filters."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


# The names kafka-acls and ZooKeeper's ACL JSON use ("Read", "IdempotentWrite", ...).
OPERATION_NAMES = {op: "".join(part.capitalize() for part in op.name.split("_")) for op in AclOperation}


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


Op = AclOperation
_IMPLIED_BY = {
    Op.DESCRIBE: frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL}),
    Op.DESCRIBE_CONFIGS: frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.ALL}),
}

SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS,
                         Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE,
                           Op.ALTER, Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
    ResourceType.DELEGATION_TOKEN: (Op.DESCRIBE,),
    ResourceType.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}


def bitfield(operations: Iterable[AclOperation]) -> int:
    return sum(1 << op for op in set(operations))


def all_operations(resource_type: ResourceType) -> int:
    """What is reported with no authorizer: every operation the resource type supports."""
    return bitfield(SUPPORTED_OPERATIONS[resource_type])


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def matches_name(self, name: str) -> bool:
        """Whether this pattern applies to resource `name` (the authorizer's notion)."""
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD_RESOURCE


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


def validate_binding(binding: AclBinding) -> None:
    """Kafka's checks on a binding to create; InvalidAclError says what is wrong."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY) or \
            pattern.resource_type not in SUPPORTED_OPERATIONS:
        raise InvalidAclError(f"Invalid resource type {pattern.resource_type}")
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAclError(f"Invalid patternType {pattern.pattern_type.name}")
    if entry.operation in (Op.ANY, Op.UNKNOWN):
        raise InvalidAclError(f"Invalid operation {entry.operation.name}")
    if entry.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise InvalidAclError(f"Invalid permissionType {entry.permission.name}")
    if not pattern.name:
        raise InvalidAclError("Invalid empty resource name")
    if pattern.resource_type is ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        raise InvalidAclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    try:
        KafkaPrincipal.parse(entry.principal)
    except ValueError:
        raise InvalidAclError(f"Could not parse principal from `{entry.principal}`") from None
    if not entry.host:
        raise InvalidAclError("Invalid empty host")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select; None and ANY match anything.

    Pattern type MATCH selects the bindings that would apply to the named resource (LITERAL equal
    or `*`, PREFIXED a prefix); ANY and a concrete type compare names exactly. Principal and host
    compare exactly (a filter for `User:alice` does not select `User:*`), as in Kafka.
    """

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermissionType

    def validate(self) -> None:
        unknown = [label for label, value in (
            ("resource type", self.resource_type), ("pattern type", self.pattern_type),
            ("operation", self.operation), ("permission type", self.permission),
        ) if value == 0]
        if unknown:
            raise InvalidAclError(f"Filter contains UNKNOWN elements: {', '.join(unknown)}")

    def matches(self, binding: AclBinding) -> bool:
        return self._matches_pattern(binding.pattern) and self._matches_entry(binding.entry)

    def _matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type is PatternType.MATCH:
            return pattern.matches_name(self.name)
        return self.name == pattern.name

    def _matches_entry(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation is Op.ANY or self.operation == entry.operation)
                and (self.permission is AclPermissionType.ANY or self.permission == entry.permission))


AclTable = Mapping[ResourcePattern, frozenset[AccessControlEntry]]


def parse_super_users(text: str | None) -> frozenset[str]:
    """`super.users`: principals separated by semicolons (`User:admin;User:broker`)."""
    return frozenset(part.strip() for part in (text or "").split(";") if part.strip())


class Authorizer:
    """Decides requests against the ACLs of a store (read on every decision, so a change that
    the store applied counts at once); see the module docstring for the rules."""

    def __init__(self, acls: Callable[[], AclTable], super_users: frozenset[str], allow_if_no_acl: bool) -> None:
        """`acls()` returns the current table; a store replaces the table on every change (never
        mutates it), so the per-type index below is rebuilt only when the table is a new one."""
        self._acls = acls
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._indexed: AclTable | None = None
        self._index: dict[ResourceType, _TypeIndex] = {}

    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        identity = str(principal)
        if identity in self.super_users:
            return True
        applying = self._applying(resource_type, name)
        if not applying:
            return self.allow_if_no_acl
        allowing = _IMPLIED_BY.get(operation, frozenset({operation, Op.ALL}))
        allowed = False
        for entries in applying:
            for entry in entries:
                if entry.principal not in (identity, WILDCARD_PRINCIPAL) or entry.host not in (host, WILDCARD_HOST):
                    continue
                if entry.permission is AclPermissionType.DENY:
                    if entry.operation is operation or entry.operation is Op.ALL:
                        return False
                elif entry.operation in allowing:
                    allowed = True
        return allowed

    def authorized_operations(self, principal: KafkaPrincipal, host: str, resource_type: ResourceType,
                              name: str) -> int:
        """The bitfield of the operations `principal` may do on the resource."""
        return bitfield(op for op in SUPPORTED_OPERATIONS[resource_type]
                        if self.authorize(principal, host, op, resource_type, name))

    def authorize_by_resource_type(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Whether `principal` may do `operation` on at least one resource of the type (KIP-679:
        an idempotent producer without IdempotentWrite needs Write on some topic).

        As Kafka: a DENY on the literal wildcard refuses; an ALLOW (literal or prefixed) that no
        DENY literal or prefix covers grants; with no ACL of the type at all,
        `allow.everyone.if.no.acl.found` decides.
        """
        identity = str(principal)
        if identity in self.super_users:
            return True
        allows: list[ResourcePattern] = []
        denies: list[ResourcePattern] = []
        of_type = False
        for pattern, entries in self._acls().items():
            if pattern.resource_type != resource_type:
                continue
            of_type = of_type or bool(entries)
            for entry in entries:
                if entry.principal not in (identity, WILDCARD_PRINCIPAL) or entry.host not in (host, WILDCARD_HOST) \
                        or entry.operation not in (operation, Op.ALL):
                    continue
                (denies if entry.permission is AclPermissionType.DENY else allows).append(pattern)
        if any(p.pattern_type is PatternType.LITERAL and p.name == WILDCARD_RESOURCE for p in denies):
            return False
        if any(not _denied_by(allow, denies) for allow in allows):
            return True
        return not of_type and self.allow_if_no_acl

    def _applying(self, resource_type: ResourceType, name: str) -> list[frozenset[AccessControlEntry]]:
        """The ACL sets of every pattern that applies to the resource (none empty)."""
        table = self._acls()
        if table is not self._indexed:
            self._index = _build_index(table)
            self._indexed = table
        index = self._index.get(resource_type)
        if index is None:
            return []
        found = [entries for prefix, entries in index.prefixed if name.startswith(prefix)]
        for literal in {name, WILDCARD_RESOURCE}:
            entries = index.literal.get(literal)
            if entries:
                found.append(entries)
        return found


@dataclass(slots=True)
class _TypeIndex:
    literal: dict[str, frozenset[AccessControlEntry]]
    prefixed: list[tuple[str, frozenset[AccessControlEntry]]]


def _build_index(table: AclTable) -> dict[ResourceType, _TypeIndex]:
    index: dict[ResourceType, _TypeIndex] = {}
    for pattern, entries in table.items():
        if not entries:
            continue
        by_type = index.setdefault(pattern.resource_type, _TypeIndex({}, []))
        if pattern.pattern_type is PatternType.PREFIXED:
            by_type.prefixed.append((pattern.name, entries))
        else:
            by_type.literal[pattern.name] = entries
    return index


def _denied_by(allow: ResourcePattern, denies: list[ResourcePattern]) -> bool:
    """Whether a DENY pattern covers every resource that ALLOW pattern `allow` names."""
    for deny in denies:
        if deny.pattern_type is PatternType.PREFIXED and allow.name.startswith(deny.name):
            return True
        if deny.pattern_type is PatternType.LITERAL and allow.pattern_type is PatternType.LITERAL \
                and deny.name == allow.name:
            return True
    return False


def apply_changes(table: AclTable, added: Iterable[AclBinding] = (),
                  removed: Iterable[AclBinding] = ()) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
    """The ACL table with `added` and `removed` applied (a copy; resources left empty disappear)."""
    changed: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for binding in added:
        changed.setdefault(binding.pattern, set(table.get(binding.pattern, ()))).add(binding.entry)
    for binding in removed:
        changed.setdefault(binding.pattern, set(table.get(binding.pattern, ()))).discard(binding.entry)
    result = dict(table)
    for pattern, entries in changed.items():
        if entries:
            result[pattern] = frozenset(entries)
        else:
            result.pop(pattern, None)
    return result


def bindings(table: AclTable) -> list[AclBinding]:
    return [AclBinding(pattern, entry) for pattern, entries in table.items() for entry in entries]


# ------------------------------------------------------------------ Kafka's ACL JSON (ZooKeeper, state files)

_PERMISSION_NAMES = {AclPermissionType.ALLOW: "Allow", AclPermissionType.DENY: "Deny"}
_TYPES_BY_NAME = {name.lower(): rt for rt, name in RESOURCE_TYPE_NAMES.items()}
_OPERATIONS_BY_NAME = {name.lower(): op for op, name in OPERATION_NAMES.items()}
_PERMISSIONS_BY_NAME = {name.lower(): perm for perm, name in _PERMISSION_NAMES.items()}


def resource_type_named(name: str) -> ResourceType:
    """`Topic`, `TOPIC` or `transactional_id` style names; ValueError when unknown."""
    found = _TYPES_BY_NAME.get(name.replace("_", "").lower())
    if found is None:
        raise ValueError(f"unknown resource type {name!r}")
    return found


def encode_entries(entries: Iterable[AccessControlEntry]) -> dict[str, object]:
    """A resource's ACLs as Kafka's ZooKeeper authorizer stores them."""
    ordered = sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission))
    return {"version": 1, "acls": [
        {"principal": e.principal, "permissionType": _PERMISSION_NAMES[e.permission],
         "operation": OPERATION_NAMES[e.operation], "host": e.host} for e in ordered]}


def decode_entries(value: object) -> frozenset[AccessControlEntry]:
    """The inverse of `encode_entries`; ValueError on anything else (an unknown operation too)."""
    try:
        return frozenset(
            AccessControlEntry(str(raw["principal"]), str(raw["host"]),
                               _OPERATIONS_BY_NAME[str(raw["operation"]).replace("_", "").lower()],
                               _PERMISSIONS_BY_NAME[str(raw["permissionType"]).lower()])
            for raw in value["acls"]  # type: ignore[index]
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not an ACL list: {exc!r}") from None


def _code(enum: type[IntEnum], value: int) -> IntEnum:
    """An enum member from its wire code; an unknown code is UNKNOWN (0), as Kafka's fromCode."""
    try:
        return enum(value)
    except ValueError:
        return enum(0)


def binding_from_wire(resource_type: int, name: str, pattern_type: int, principal: str, host: str,
                      operation: int, permission: int) -> AclBinding:
    """A binding from CreateAcls' fields (not yet validated: see `validate_binding`)."""
    return AclBinding(
        ResourcePattern(_code(ResourceType, resource_type), name, _code(PatternType, pattern_type)),  # type: ignore[arg-type]
        AccessControlEntry(principal, host, _code(AclOperation, operation),  # type: ignore[arg-type]
                           _code(AclPermissionType, permission)),  # type: ignore[arg-type]
    )


def filter_from_wire(resource_type: int, name: str | None, pattern_type: int, principal: str | None,
                     host: str | None, operation: int, permission: int) -> AclBindingFilter:
    """A filter from DescribeAcls' or DeleteAcls' fields (not yet validated)."""
    return AclBindingFilter(
        _code(ResourceType, resource_type), name, _code(PatternType, pattern_type), principal, host,  # type: ignore[arg-type]
        _code(AclOperation, operation), _code(AclPermissionType, permission),  # type: ignore[arg-type]
    )
