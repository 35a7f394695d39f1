"""The authorizer's rules, in process: pattern matching, implications, DENY over ALLOW, wildcards,
super users, the no-ACL default, filters and binding validation (security/acl.py)."""

from __future__ import annotations

import pytest

from logbus.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourceType,
    apply_changes,
    bitfield,
    parse_super_users,
    validate_binding,
)
from logbus.security.principal import ANONYMOUS, KafkaPrincipal

Op, Perm, RT, PT = AclOperation, AclPermissionType, ResourceType, PatternType
ALICE = KafkaPrincipal("User", "alice")
HOST = "10.0.0.1"


def acl(resource_type: RT, name: str, pattern: PT, op: Op, perm: Perm = Perm.ALLOW,
        principal: str = "User:alice", host: str = "*") -> AclBinding:
    return AclBinding(ResourcePattern(resource_type, name, pattern), AccessControlEntry(principal, host, op, perm))


def authorizer(*bindings: AclBinding, super_users: str = "", allow_if_no_acl: bool = False) -> Authorizer:
    table = apply_changes({}, bindings)
    return Authorizer(lambda: table, parse_super_users(super_users), allow_if_no_acl)


def test_literal_prefixed_and_wildcard_patterns_apply_to_the_names_they_cover() -> None:
    auth = authorizer(acl(RT.TOPIC, "orders", PT.LITERAL, Op.WRITE), acl(RT.TOPIC, "a.", PT.PREFIXED, Op.WRITE),
                      acl(RT.GROUP, "*", PT.LITERAL, Op.READ))
    assert auth.authorize(ALICE, HOST, Op.WRITE, RT.TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, RT.TOPIC, "orders2")
    assert auth.authorize(ALICE, HOST, Op.WRITE, RT.TOPIC, "a.x")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, RT.TOPIC, "b.x")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, RT.TOPIC, "a")
    assert auth.authorize(ALICE, HOST, Op.READ, RT.GROUP, "anything")
    assert not auth.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "orders")  # Write does not imply Read


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL])
def test_describe_is_implied_by_read_write_delete_alter_and_all(granted: Op) -> None:
    auth = authorizer(acl(RT.TOPIC, "t", PT.LITERAL, granted))
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE, RT.TOPIC, "t")


def test_describe_configs_is_implied_by_alter_configs_and_nothing_else_is_implied() -> None:
    auth = authorizer(acl(RT.TOPIC, "t", PT.LITERAL, Op.ALTER_CONFIGS), acl(RT.TOPIC, "u", PT.LITERAL, Op.DESCRIBE))
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, RT.TOPIC, "t")
    assert not auth.authorize(ALICE, HOST, Op.DESCRIBE, RT.TOPIC, "t")
    assert not auth.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "u")  # Describe implies nothing


def test_all_covers_every_operation() -> None:
    auth = authorizer(acl(RT.CLUSTER, "kafka-cluster", PT.LITERAL, Op.ALL))
    for op in (Op.CREATE, Op.ALTER, Op.CLUSTER_ACTION, Op.IDEMPOTENT_WRITE, Op.DESCRIBE_CONFIGS):
        assert auth.authorize(ALICE, HOST, op, RT.CLUSTER, "kafka-cluster")


def test_deny_wins_over_allow_but_an_implied_operation_is_not_denied() -> None:
    auth = authorizer(acl(RT.TOPIC, "a.", PT.PREFIXED, Op.ALL),
                      acl(RT.TOPIC, "a.secret", PT.LITERAL, Op.READ, Perm.DENY))
    assert auth.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "a.public")
    assert not auth.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "a.secret")
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE, RT.TOPIC, "a.secret")  # Deny Read is not Deny Describe
    denied_all = authorizer(acl(RT.TOPIC, "t", PT.LITERAL, Op.READ),
                            acl(RT.TOPIC, "*", PT.LITERAL, Op.ALL, Perm.DENY, principal="User:*"))
    assert not denied_all.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")


def test_wildcard_principal_and_host_filters() -> None:
    auth = authorizer(acl(RT.TOPIC, "t", PT.LITERAL, Op.READ, principal="User:*", host=HOST),
                      acl(RT.TOPIC, "u", PT.LITERAL, Op.READ, principal="User:bob"))
    assert auth.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")
    assert auth.authorize(ANONYMOUS, HOST, Op.READ, RT.TOPIC, "t")
    assert not auth.authorize(ALICE, "10.0.0.2", Op.READ, RT.TOPIC, "t")
    assert not auth.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "u")


def test_super_users_may_do_everything_and_are_exact_principals() -> None:
    auth = authorizer(acl(RT.TOPIC, "t", PT.LITERAL, Op.ALL, Perm.DENY, principal="User:admin"),
                      super_users=" User:admin ; User:ANONYMOUS")
    assert auth.super_users == {"User:admin", "User:ANONYMOUS"}
    assert auth.authorize(KafkaPrincipal("User", "admin"), HOST, Op.READ, RT.TOPIC, "t")
    assert auth.authorize(ANONYMOUS, HOST, Op.CLUSTER_ACTION, RT.CLUSTER, "kafka-cluster")
    assert not auth.authorize(KafkaPrincipal("User", "admin2"), HOST, Op.READ, RT.TOPIC, "t")


def test_no_acl_on_a_resource_is_the_allow_everyone_setting() -> None:
    other_user = acl(RT.TOPIC, "t", PT.LITERAL, Op.READ, principal="User:bob")
    assert not authorizer(allow_if_no_acl=False).authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")
    assert authorizer(allow_if_no_acl=True).authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")
    # an ACL for somebody else means the resource has ACLs: the setting no longer applies
    assert not authorizer(other_user, allow_if_no_acl=True).authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")
    assert authorizer(other_user, allow_if_no_acl=True).authorize(ALICE, HOST, Op.READ, RT.TOPIC, "u")


def test_authorized_operations_bitfield() -> None:
    auth = authorizer(acl(RT.TOPIC, "t", PT.LITERAL, Op.READ), acl(RT.TOPIC, "t", PT.LITERAL, Op.ALTER_CONFIGS))
    assert auth.authorized_operations(ALICE, HOST, RT.TOPIC, "t") == \
        bitfield([Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS])
    assert auth.authorized_operations(ALICE, HOST, RT.TOPIC, "other") == 0


def test_authorize_by_resource_type_needs_an_allow_that_no_deny_covers() -> None:
    assert authorizer(acl(RT.TOPIC, "a.", PT.PREFIXED, Op.WRITE)).authorize_by_resource_type(
        ALICE, HOST, Op.WRITE, RT.TOPIC)
    assert not authorizer(acl(RT.TOPIC, "a.", PT.PREFIXED, Op.WRITE),
                          acl(RT.TOPIC, "a", PT.PREFIXED, Op.WRITE, Perm.DENY)).authorize_by_resource_type(
        ALICE, HOST, Op.WRITE, RT.TOPIC)
    assert not authorizer(acl(RT.TOPIC, "t", PT.LITERAL, Op.WRITE),
                          acl(RT.TOPIC, "*", PT.LITERAL, Op.WRITE, Perm.DENY)).authorize_by_resource_type(
        ALICE, HOST, Op.WRITE, RT.TOPIC)
    assert not authorizer(acl(RT.TOPIC, "t", PT.LITERAL, Op.READ)).authorize_by_resource_type(
        ALICE, HOST, Op.WRITE, RT.TOPIC)
    assert authorizer(allow_if_no_acl=True).authorize_by_resource_type(ALICE, HOST, Op.WRITE, RT.TOPIC)


def test_filters_match_as_kafka_matches_them() -> None:
    literal = acl(RT.TOPIC, "a.x", PT.LITERAL, Op.READ)
    prefixed = acl(RT.TOPIC, "a.", PT.PREFIXED, Op.WRITE)
    wildcard = acl(RT.TOPIC, "*", PT.LITERAL, Op.READ, principal="User:*")

    def selected(name: str | None, pattern: PT, **kw: object) -> set[AclBinding]:
        fields = {"principal": None, "host": None, "operation": Op.ANY, "permission": Perm.ANY, **kw}
        flt = AclBindingFilter(RT.TOPIC, name, pattern, **fields)  # type: ignore[arg-type]
        return {b for b in (literal, prefixed, wildcard) if flt.matches(b)}

    assert selected("a.x", PT.MATCH) == {literal, prefixed, wildcard}
    assert selected("a.x", PT.ANY) == {literal}
    assert selected("a.", PT.PREFIXED) == {prefixed}
    assert selected("a.", PT.LITERAL) == set()
    assert selected(None, PT.ANY) == {literal, prefixed, wildcard}
    assert selected(None, PT.ANY, principal="User:alice") == {literal, prefixed}  # User:* is not selected
    assert selected(None, PT.ANY, operation=Op.WRITE) == {prefixed}


def test_bad_bindings_and_filters_are_invalid() -> None:
    for bad in (acl(RT.ANY, "t", PT.LITERAL, Op.READ), acl(RT.TOPIC, "t", PT.MATCH, Op.READ),
                acl(RT.TOPIC, "t", PT.LITERAL, Op.ANY), acl(RT.TOPIC, "t", PT.LITERAL, Op.READ, Perm.ANY),
                acl(RT.TOPIC, "", PT.LITERAL, Op.READ), acl(RT.CLUSTER, "other", PT.LITERAL, Op.ALTER),
                acl(RT.TOPIC, "t", PT.LITERAL, Op.READ, principal="alice")):
        with pytest.raises(InvalidAclError):
            validate_binding(bad)
    validate_binding(acl(RT.CLUSTER, "kafka-cluster", PT.LITERAL, Op.ALTER))
    with pytest.raises(InvalidAclError):
        AclBindingFilter(RT.TOPIC, None, PT.UNKNOWN, None, None, Op.ANY, Perm.ANY).validate()


def test_apply_changes_copies_and_drops_emptied_resources() -> None:
    binding = acl(RT.TOPIC, "t", PT.LITERAL, Op.READ)
    table = apply_changes({}, [binding])
    assert apply_changes(table, removed=[binding]) == {}
    assert table == {binding.pattern: frozenset({binding.entry})}
