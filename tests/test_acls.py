"""ACL authorization against real brokers and real clients.

Every connection is User:ANONYMOUS until TLS/SASL authenticates clients, so the tests grant and
deny User:ANONYMOUS (and make it a super user to set ACLs up, then restart without that).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import kafka
import kafka.admin as kp
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from helpers import QUIET, RawConnection, raw_request, transactional_producer, wait_until
from kio.schema.alter_replica_log_dirs.v2 import request as log_dirs_v2
from kio.schema.alter_share_group_offsets.v0.request import (
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from kio.schema.delete_acls.v3 import request as delete_acls_v3
from kio.schema.delete_share_group_offsets.v0.request import DeleteShareGroupOffsetsRequestTopic
from kio.schema.describe_share_group_offsets.v1.request import (
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)
from kio.schema.describe_topic_partitions.v0 import request as dtp_v0
from kio.schema.elect_leaders.v2 import request as elect_v2
from kio.schema.errors import ErrorCode
from kio.schema.leave_group.v5 import request as leave_v5
from kio.schema.metadata.v10 import request as metadata_v10
from kio.schema.offset_commit.v9 import request as offset_commit_v9
from kio.schema.offset_delete.v0 import request as offset_delete_v0
from kio.schema.write_txn_markers.v1 import request as markers_v1

from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.testing import BrokerProcess, running_broker, running_cluster

AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}
SUPER_ANONYMOUS = {**AUTHORIZER, "super.users": "User:ANONYMOUS"}
ANONYMOUS = "User:ANONYMOUS"
DESCRIBE_ACLS, CREATE_ACLS, METADATA, DESCRIBE_TRANSACTIONS = 29, 30, 3, 65
LIST_CONFIG_RESOURCES, DESCRIBE_TOPIC_PARTITIONS = 74, 75
EVERYTHING = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                              AclPermissionType.ANY)


ANY_FILTER = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
              "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}


def admin(broker: BrokerProcess | str) -> AdminClient:
    bootstrap = broker if isinstance(broker, str) else broker.bootstrap
    return AdminClient({"bootstrap.servers": bootstrap, **QUIET})


def anonymous(resource: ResourceType, name: str, operation: AclOperation,
              pattern: ResourcePatternType = ResourcePatternType.LITERAL,
              permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(resource, name, pattern, ANONYMOUS, "*", operation, permission)


def create_acls(bootstrap: str, bindings: list[AclBinding]) -> None:
    client = admin(bootstrap)  # a client must outlive its futures
    for future in client.create_acls(bindings).values():
        future.result(15)


def produce_error(bootstrap: str, topic: str, **config: object) -> int | None:
    """The delivery error code of one record (None: delivered)."""
    outcome: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000, **QUIET, **config})
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(15)
    assert outcome, "no delivery report"
    return None if outcome[0] is None else outcome[0].code()


def consume_error(bootstrap: str, topic: str, group: str) -> int | None:
    """Join `group` and read `topic` from the start: None once a record arrives, else the error code.
    Kafka's shortest session: a member an earlier call left behind (closed before its join was
    done, on a busy machine) holds up the next join until it expires."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000, **QUIET})
    consumer.subscribe([topic])
    try:
        def outcome() -> tuple[int | None] | None:
            message = consumer.poll(0.5)
            if message is None:
                return None
            return (message.error().code() if message.error() else None,)
        return wait_until(outcome, timeout=60, message=f"a record or an error from {topic} in {group}")[0]
    finally:
        consumer.close()


def test_acl_apis_are_security_disabled_without_an_authorizer() -> None:
    with running_broker() as broker:
        client = admin(broker)
        future = client.create_acls([anonymous(ResourceType.TOPIC, "t", AclOperation.READ)])
        with pytest.raises(KafkaException) as refused:
            next(iter(future.values())).result(15)
        assert refused.value.args[0].code() == KafkaError.SECURITY_DISABLED
        described = raw_request(broker.bootstrap, DESCRIBE_ACLS, 3, **ANY_FILTER)  # librdkafka drops this error
        assert described.error_code == ErrorCode.security_disabled
        assert produce_error(broker.bootstrap, "open") is None  # and nothing else is authorized


def test_confluent_admin_creates_describes_and_deletes_acls() -> None:
    with running_broker(SUPER_ANONYMOUS) as broker:
        client = admin(broker)
        prefixed = AclBinding(ResourceType.TOPIC, "a.", ResourcePatternType.PREFIXED, "User:alice", "*",
                              AclOperation.WRITE, AclPermissionType.ALLOW)
        literal = AclBinding(ResourceType.GROUP, "g", ResourcePatternType.LITERAL, "User:alice", "10.0.0.1",
                             AclOperation.READ, AclPermissionType.DENY)
        cluster = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:*", "*",
                             AclOperation.DESCRIBE, AclPermissionType.ALLOW)
        create_acls(broker.bootstrap, [prefixed, literal, cluster])
        create_acls(broker.bootstrap, [prefixed])  # a repeat changes nothing
        assert set(client.describe_acls(EVERYTHING).result(15)) == {prefixed, literal, cluster}
        match_topic = AclBindingFilter(ResourceType.TOPIC, "a.x", ResourcePatternType.MATCH, None, None,
                                       AclOperation.ANY, AclPermissionType.ANY)
        assert client.describe_acls(match_topic).result(15) == [prefixed]
        exact = AclBindingFilter(ResourceType.TOPIC, "a.x", ResourcePatternType.ANY, None, None,
                                 AclOperation.ANY, AclPermissionType.ANY)
        assert client.describe_acls(exact).result(15) == []
        by_group = AclBindingFilter(ResourceType.GROUP, None, ResourcePatternType.ANY, None, None,
                                    AclOperation.ANY, AclPermissionType.ANY)
        deleted = client.delete_acls([by_group])[by_group].result(15)
        assert deleted == [literal]
        assert set(client.describe_acls(EVERYTHING).result(15)) == {prefixed, cluster}
        with open(os.path.join(broker.data_dir, "logbus-metadata.json"), encoding="utf-8") as handle:
            state = json.load(handle)
        assert {"resource_type": "Topic", "name": "a.", "pattern_type": "PREFIXED", "version": 1, "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Write", "host": "*"}]} in state["acls"]


def test_kafka_python_admin_creates_describes_and_deletes_acls() -> None:
    with running_broker(SUPER_ANONYMOUS) as broker:
        client = kp.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            resource = kp.ResourcePattern(kp.ResourceType.TOPIC, "orders", kp.ACLResourcePatternType.LITERAL)
            acl = kp.ACL("User:bob", "*", kp.ACLOperation.READ, kp.ACLPermissionType.ALLOW, resource)
            created = client.create_acls([acl])
            assert created["succeeded"] == [acl] and not created["failed"]
            any_filter = kp.ACLFilter(None, None, kp.ACLOperation.ANY, kp.ACLPermissionType.ANY,
                                      kp.ResourcePatternFilter(kp.ResourceType.ANY, None,
                                                               kp.ACLResourcePatternType.ANY))
            described, error = client.describe_acls(any_filter)
            assert error is kafka.errors.NoError and described == [acl]
            deleted = client.delete_acls([any_filter])
            assert [matched for _filter, matches, _error in deleted for matched in matches] == [acl]
            assert client.describe_acls(any_filter)[0] == []
        finally:
            client.close()


def test_bad_bindings_and_filters_are_invalid_request() -> None:
    with running_broker(SUPER_ANONYMOUS) as broker:
        creation = {"resource_type": 2, "resource_name": "t", "principal": ANONYMOUS, "host": "*",
                    "operation": 3, "permission_type": 3}
        bad = [{**creation, "resource_pattern_type": 2},  # MATCH is for filters only
               {**creation, "resource_pattern_type": 3, "operation": 1},  # ANY
               {**creation, "resource_pattern_type": 3, "principal": "nobody"},
               {**creation, "resource_pattern_type": 3, "resource_type": 4, "resource_name": "other-cluster"}]
        good = {**creation, "resource_pattern_type": 3}
        from kio.schema.create_acls.v3 import request as create_v3
        answer = raw_request(broker.bootstrap, CREATE_ACLS, 3, creations=tuple(
            create_v3.AclCreation(**fields) for fields in [*bad, good]))
        assert [r.error_code for r in answer.results] == [ErrorCode.invalid_request] * 4 + [ErrorCode.none]
        described = raw_request(broker.bootstrap, DESCRIBE_ACLS, 3, **{**ANY_FILTER, "pattern_type_filter": 0})
        assert described.error_code == ErrorCode.invalid_request
        described = raw_request(broker.bootstrap, DESCRIBE_ACLS, 3, **ANY_FILTER)
        assert [(r.resource_name, len(r.acls)) for r in described.resources] == [("t", 1)]


@pytest.fixture(scope="module")
def matrix() -> Iterator[BrokerProcess]:
    """A broker where User:ANONYMOUS may write and read topics `a.*` (prefixed), read group `g`,
    describe the cluster and transactional id `tx-open`, and is denied writing `a.denied`; set up
    as a super user (who leaves transaction `tx-open` open on `a.txn` and `b.txn`), then restarted
    without super users (so the ACLs must have survived the restart)."""
    with running_broker(SUPER_ANONYMOUS) as broker:
        client = admin(broker)
        topics = ("a.x", "b.x", "a.denied", "a.txn", "b.txn")
        for future in client.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
            future.result(15)
        create_acls(broker.bootstrap, [
            anonymous(ResourceType.TOPIC, "a.", AclOperation.WRITE, ResourcePatternType.PREFIXED),
            anonymous(ResourceType.TOPIC, "a.", AclOperation.READ, ResourcePatternType.PREFIXED),
            anonymous(ResourceType.TOPIC, "a.denied", AclOperation.WRITE, permission=AclPermissionType.DENY),
            anonymous(ResourceType.GROUP, "g", AclOperation.READ),
            anonymous(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
            anonymous(ResourceType.TRANSACTIONAL_ID, "tx-open", AclOperation.DESCRIBE),
        ])
        assert produce_error(broker.bootstrap, "a.x") is None
        producer = transactional_producer(broker.bootstrap, "tx-open", **{"transaction.timeout.ms": 300000})
        producer.begin_transaction()
        for topic in ("a.txn", "b.txn"):
            producer.produce(topic, b"open")
        assert producer.flush(15) == 0
        assert _transaction_topics(broker, "tx-open") == {"a.txn": [0], "b.txn": [0]}  # a super user sees all
        broker.stop()
        broker.config = dict(AUTHORIZER)
        yield broker.restart()


def test_acls_survive_a_restart(matrix: BrokerProcess) -> None:
    client = admin(matrix)
    found = client.describe_acls(EVERYTHING).result(15)
    assert len(found) == 6 and {b.name for b in found} == {"a.", "a.denied", "g", "kafka-cluster", "tx-open"}


def _transaction_topics(broker: BrokerProcess, transactional_id: str) -> dict[str, list[int]]:
    answer = raw_request(broker.bootstrap, DESCRIBE_TRANSACTIONS, 0, transactional_ids=(transactional_id,))
    state = answer.transaction_states[0]
    assert (state.error_code, state.transaction_state) == (ErrorCode.none, "Ongoing"), state
    return {topic.topic: list(topic.partitions) for topic in state.topics}


def test_describe_transactions_lists_only_partitions_of_topics_the_principal_may_describe(
        matrix: BrokerProcess) -> None:
    """As Kafka's KafkaApis: `b.txn` is in the transaction, but User:ANONYMOUS may not describe it."""
    assert _transaction_topics(matrix, "tx-open") == {"a.txn": [0]}


def test_writes_are_allowed_on_prefixed_topics_only_and_deny_wins(matrix: BrokerProcess) -> None:
    assert produce_error(matrix.bootstrap, "a.x") is None
    assert produce_error(matrix.bootstrap, "b.x") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(matrix.bootstrap, "a.denied") == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_an_idempotent_producer_needs_write_on_some_topic(matrix: BrokerProcess) -> None:
    """kafka-python is idempotent by default: InitProducerId passes on Write to `a.*` (KIP-679)."""
    producer = kafka.KafkaProducer(bootstrap_servers=matrix.bootstrap, enable_idempotence=True)
    try:
        assert producer.send("a.x", b"idempotent").get(15).offset >= 0
    finally:
        producer.close()


def test_a_transactional_producer_needs_its_transactional_id(matrix: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": matrix.bootstrap, "transactional.id": "tx", **QUIET})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(15)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_reading_needs_read_on_the_group(matrix: BrokerProcess) -> None:
    assert consume_error(matrix.bootstrap, "a.x", "g") is None
    assert consume_error(matrix.bootstrap, "a.x", "h") == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert consume_error(matrix.bootstrap, "b.x", "g") == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_creating_deleting_and_describing_configs_need_their_acls(matrix: BrokerProcess) -> None:
    client = admin(matrix)
    with pytest.raises(KafkaException) as refused:
        client.create_topics([NewTopic("a.new", 1, 1)])["a.new"].result(15)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    future = client.create_acls([anonymous(ResourceType.TOPIC, "b.", AclOperation.ALL, ResourcePatternType.PREFIXED)])
    with pytest.raises(KafkaException) as refused:
        next(iter(future.values())).result(15)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    deleted = client.delete_topics(["b.x", "missing"])
    for future in deleted.values():  # Delete is decided before existence: a missing topic is not revealed
        with pytest.raises(KafkaException) as refused:
            future.result(15)
        assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    configs = client.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "a.x")])
    with pytest.raises(KafkaException) as refused:  # Read and Write do not imply DescribeConfigs
        next(iter(configs.values())).result(15)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    group_configs = client.describe_configs([ConfigResource(ConfigResource.Type.GROUP, "g")])
    with pytest.raises(KafkaException) as refused:  # a group's configs need DescribeConfigs on the group
        next(iter(group_configs.values())).result(15)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    # auto-creation through Metadata needs Create too
    answer = metadata(matrix, ["a.auto"], allow_auto_topic_creation=True)
    assert [t.error_code for t in answer.topics] == [ErrorCode.topic_authorization_failed]


def test_metadata_hides_topics_the_principal_may_not_describe(matrix: BrokerProcess) -> None:
    client = admin(matrix)
    topics = client.list_topics(timeout=15).topics
    assert {"a.x", "a.denied"} <= set(topics) and "b.x" not in topics
    answer = metadata(matrix, ["b.x", "a.x"], include_topic_authorized_operations=True,
                      include_cluster_authorized_operations=True)
    by_name = {t.name: t for t in answer.topics}
    assert by_name["b.x"].error_code == ErrorCode.topic_authorization_failed
    read, write, describe = 3, 4, 8
    assert by_name["a.x"].topic_authorized_operations == (1 << read) | (1 << write) | (1 << describe)
    assert answer.cluster_authorized_operations == 1 << describe


def test_describe_topic_partitions_hides_topics_the_principal_may_not_describe(matrix: BrokerProcess) -> None:
    """As Kafka's DescribeTopicPartitionsRequestHandler: all topics lists the describable ones;
    a named one that is not describable is TOPIC_AUTHORIZATION_FAILED (without its id), existing
    or not, after the described ones."""
    every = raw_request(matrix.bootstrap, DESCRIBE_TOPIC_PARTITIONS, 0, topics=(), response_partition_limit=100,
                        cursor=None)
    assert {t.name for t in every.topics} == {"a.x", "a.denied", "a.txn"}
    named = raw_request(matrix.bootstrap, DESCRIBE_TOPIC_PARTITIONS, 0, response_partition_limit=100, cursor=None,
                        topics=tuple(dtp_v0.TopicRequest(name=n) for n in ("b.x", "missing", "a.x")))
    no_id = (None, uuid.UUID(int=0))
    assert [(t.name, t.error_code, len(t.partitions), t.topic_id in no_id) for t in named.topics] == [
        ("a.x", ErrorCode.none, 1, False), ("b.x", ErrorCode.topic_authorization_failed, 0, True),
        ("missing", ErrorCode.topic_authorization_failed, 0, True)]
    read, write, describe = 3, 4, 8
    assert named.topics[0].topic_authorized_operations == (1 << read) | (1 << write) | (1 << describe)


def test_list_config_resources_needs_describe_configs_on_the_cluster(matrix: BrokerProcess) -> None:
    for version in (0, 1):
        answer = raw_request(matrix.bootstrap, LIST_CONFIG_RESOURCES, version)
        assert (answer.error_code, answer.config_resources) == (ErrorCode.cluster_authorization_failed, ())


def test_super_users_may_do_everything() -> None:
    with running_broker(SUPER_ANONYMOUS) as broker:
        create_acls(broker.bootstrap, [anonymous(ResourceType.TOPIC, "*", AclOperation.ALL,
                                                 permission=AclPermissionType.DENY)])
        assert produce_error(broker.bootstrap, "anything") is None  # auto-created and written


@pytest.mark.parametrize("allow", [True, False])
def test_allow_everyone_if_no_acl_found_decides_for_resources_without_acls(allow: bool) -> None:
    with running_broker({**AUTHORIZER, "allow.everyone.if.no.acl.found": str(allow).lower()}) as broker:
        expected = None if allow else KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert produce_error(broker.bootstrap, "open") == expected


def test_an_acl_created_through_one_broker_takes_effect_on_another(zookeeper: ZooKeeperServer) -> None:
    """ZooKeeper: /kafka-acl znodes and the change notifications every broker watches. No ACL on
    the cluster and allow.everyone.if.no.acl.found let the brokers replicate and the test set ACLs."""
    config = {**AUTHORIZER, "allow.everyone.if.no.acl.found": "true"}
    with running_cluster(2, config, zookeeper=zookeeper) as cluster:
        first, second = cluster.brokers[1], cluster.brokers[2]
        client = admin(first)
        client.create_topics([NewTopic("t", 1, 2)])["t"].result(15)
        wait_until(lambda: _topic_error(second, "t") == ErrorCode.none, message="t on broker 2")
        # acks=all waits for the follower's fetch: ClusterAction, allowed as the cluster has no ACL
        assert produce_error(cluster.bootstrap, "t", acks="all") is None
        create_acls(first.bootstrap, [anonymous(ResourceType.TOPIC, "t", AclOperation.DESCRIBE,
                                                permission=AclPermissionType.DENY)])
        wait_until(lambda: _topic_error(second, "t") == ErrorCode.topic_authorization_failed,
                   message="the DENY to reach broker 2")
        create_acls(second.bootstrap, [anonymous(ResourceType.TOPIC, "p.", AclOperation.READ,
                                                 ResourcePatternType.PREFIXED)])
        second_client = admin(second)
        assert len(second_client.describe_acls(EVERYTHING).result(15)) == 2
        wait_until(lambda: len(client.describe_acls(EVERYTHING).result(15)) == 2, message="broker 1 to see both")
        slash = client.create_acls([anonymous(ResourceType.GROUP, "a/b", AclOperation.READ)])
        with pytest.raises(KafkaException) as refused:  # one znode per name: no '/' in it
            next(iter(slash.values())).result(15)
        assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=cluster.config["zookeeper.connect"])
        zk.start(10)
        try:
            raw, _ = zk.get("/kafka-acl/Topic/t")
            assert json.loads(raw) == {"version": 1, "acls": [
                {"principal": ANONYMOUS, "permissionType": "Deny", "operation": "Describe", "host": "*"}]}
            assert zk.get_children("/kafka-acl-changes")
            raw, _ = zk.get("/kafka-acl-extended/prefixed/Topic/p.")
            assert json.loads(raw)["acls"][0]["operation"] == "Read"
            [change] = zk.get_children("/kafka-acl-extended-changes")
            raw, _ = zk.get(f"/kafka-acl-extended-changes/{change}")
            assert json.loads(raw) == {"version": 1, "resourceType": "TOPIC", "name": "p.", "patternType": "PREFIXED"}
        finally:
            zk.stop()
            zk.close()


def _topic_error(broker: BrokerProcess, topic: str) -> int:
    return metadata(broker, [topic]).topics[0].error_code


def metadata(broker: BrokerProcess, topics: list[str], **flags: bool) -> Any:
    """A Metadata v10 answer for `topics` (no auto-creation, no operations unless `flags` say)."""
    fields = {"allow_auto_topic_creation": False, "include_topic_authorized_operations": False,
              "include_cluster_authorized_operations": False, **flags}
    return raw_request(broker.bootstrap, METADATA, 10, topics=tuple(
        metadata_v10.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=name) for name in topics), **fields)


def acls_cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logbus", "acls", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_logbus_acls_adds_lists_and_removes_as_kafka_acls() -> None:
    with running_broker(SUPER_ANONYMOUS) as broker:
        added = acls_cli(broker.bootstrap, "add", "--allow-principal", "User:alice", "--operation", "Read",
                         "--operation", "write", "--topic", "a.", "--resource-pattern-type", "prefixed")
        assert added.returncode == 0, added.stderr
        assert added.stdout.count("Added") == 2
        denied = acls_cli(broker.bootstrap, "add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.1",
                          "--group", "g")
        assert denied.returncode == 0, denied.stderr
        client = admin(broker)
        assert {(b.name, b.operation, b.permission_type, b.host) for b in client.describe_acls(EVERYTHING).result(15)} \
            == {("a.", AclOperation.READ, AclPermissionType.ALLOW, "*"),
                ("a.", AclOperation.WRITE, AclPermissionType.ALLOW, "*"),
                ("g", AclOperation.ALL, AclPermissionType.DENY, "10.0.0.1")}
        matching = acls_cli(broker.bootstrap, "list", "--topic", "a.x", "--resource-pattern-type", "match")
        assert "ResourcePattern(resourceType=TOPIC, name=a., patternType=PREFIXED)" in matching.stdout
        assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in matching.stdout
        assert "name=g" not in matching.stdout
        removed = acls_cli(broker.bootstrap, "remove", "--group", "g")
        assert removed.returncode == 0 and removed.stdout.count("Removed") == 1
        assert "name=g" not in acls_cli(broker.bootstrap, "list").stdout
        bad = acls_cli(broker.bootstrap, "add", "--allow-principal", "alice", "--topic", "t")
        assert bad.returncode == 1 and "Could not parse principal" in bad.stderr
        assert acls_cli(broker.bootstrap, "add", "--topic", "t").returncode == 2
        consumer = acls_cli(broker.bootstrap, "add", "--allow-principal", "User:app", "--consumer", "--topic", "c",
                            "--group", "cg")
        producer = acls_cli(broker.bootstrap, "add", "--allow-principal", "User:app", "--producer", "--topic", "p",
                            "--transactional-id", "tx", "--idempotent")
        assert consumer.returncode == 0 and producer.returncode == 0, consumer.stderr + producer.stderr
        app = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:app", None, AclOperation.ANY,
                               AclPermissionType.ANY)
        assert {(b.restype, b.name, b.operation) for b in client.describe_acls(app).result(15)} == {
            (ResourceType.TOPIC, "c", AclOperation.READ), (ResourceType.TOPIC, "c", AclOperation.DESCRIBE),
            (ResourceType.GROUP, "cg", AclOperation.READ),
            (ResourceType.TOPIC, "p", AclOperation.WRITE), (ResourceType.TOPIC, "p", AclOperation.DESCRIBE),
            (ResourceType.TOPIC, "p", AclOperation.CREATE),
            (ResourceType.TRANSACTIONAL_ID, "tx", AclOperation.WRITE),
            (ResourceType.TRANSACTIONAL_ID, "tx", AclOperation.DESCRIBE),
            (ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE)}
        removed = acls_cli(broker.bootstrap, "remove", "--allow-principal", "User:app", "--consumer", "--topic", "c",
                           "--group", "cg")
        assert removed.returncode == 0 and removed.stdout.count("Removed") == 3


def test_zookeeper_acl_change_notifications_are_purged_once_expired(zookeeper: ZooKeeperServer,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """In process, on a real ZooKeeper: the store applies its own notifications and deletes the
    expired ones (Kafka's 15 minutes, set to 0 here) when the next one arrives."""
    from logbus.cluster import zk_data, zk_watchers
    from logbus.cluster import zookeeper as zk_store
    from logbus.security import acl

    def binding(name: str) -> acl.AclBinding:
        return acl.AclBinding(acl.ResourcePattern(acl.ResourceType.TOPIC, name, acl.PatternType.LITERAL),
                              acl.AccessControlEntry(ANONYMOUS, "*", acl.AclOperation.READ,
                                                     acl.AclPermissionType.ALLOW))

    async def scenario(connect: str) -> None:
        store = zk_store.ZooKeeperMetadataStore(connect, 1, 6000)
        await store.start()
        try:
            await store.alter_acls([binding("first")], [])
            [first] = store.client.get_children(zk_data.LITERAL_ACL_CHANGES)
            monkeypatch.setattr(zk_watchers, "ACL_CHANGE_EXPIRATION_MS", 0)
            await store.alter_acls([binding("second")], [])
            assert set(store.acls()) == {binding("first").pattern, binding("second").pattern}
            deadline = asyncio.get_running_loop().time() + 10
            while first in store.client.get_children(zk_data.LITERAL_ACL_CHANGES):
                assert asyncio.get_running_loop().time() < deadline, "the expired notification stayed"
                await asyncio.sleep(0.05)
            await store.alter_acls([], [binding("first")])  # still applied after the purge
            assert set(store.acls()) == {binding("second").pattern}
        finally:
            await store.close()

    asyncio.run(scenario(f"{zookeeper.connect_string}/acl-purge-{uuid.uuid4().hex}"))


def test_a_fetch_as_a_follower_needs_cluster_action(matrix: BrokerProcess) -> None:
    """Read on `a.*` serves consumers; the same fetch sent as replica 7 is a follower's and needs
    ClusterAction on the cluster, which User:ANONYMOUS lacks here."""
    from kio.schema.fetch.v12 import request as fetch_v12

    def fetch(replica_id: int) -> int:
        partition = fetch_v12.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                             last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
        answer = raw_request(matrix.bootstrap, 1, 12, cluster_id=None, replica_id=replica_id,
                             max_wait=timedelta(0), min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                             session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
                             topics=(fetch_v12.FetchTopic(topic="a.x", partitions=(partition,)),))
        return answer.responses[0].partitions[0].error_code

    assert fetch(-1) == ErrorCode.none
    assert fetch(7) == ErrorCode.topic_authorization_failed


def test_authorized_operations_report_what_the_acls_allow(matrix: BrokerProcess) -> None:
    assert consume_error(matrix.bootstrap, "a.x", "g") is None  # the group exists
    client = admin(matrix)
    group = client.describe_consumer_groups(["g"], include_authorized_operations=True)["g"].result(15)
    assert set(group.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}
    cluster = client.describe_cluster(include_authorized_operations=True).result(15)
    assert cluster.authorized_operations == [AclOperation.DESCRIBE]
    topics = client.describe_topics(TopicCollection(["a.x"]), include_authorized_operations=True)
    assert set(topics["a.x"].result(15).authorized_operations) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE}


def test_consumer_group_heartbeat_needs_read_on_the_group_and_describe_on_its_topics(matrix: BrokerProcess) -> None:
    """KIP-848 groups: ConsumerGroupHeartbeat needs Read on the group and Describe on the topics it
    names; ConsumerGroupDescribe needs Describe on the group and on every topic its members
    subscribe to (here through a regex, whose matches ACLs do not filter yet), as Kafka."""
    def join(connection: RawConnection, group: str, topic: str | None, regex: str | None = None) -> Any:
        connection.call(10, 3, key=group, key_type=0)  # creates __consumer_offsets
        return connection.call(68, 1, group_id=group, member_id="m1", member_epoch=0,
                               rebalance_timeout=timedelta(seconds=30),
                               subscribed_topic_names=() if topic is None else (topic,),
                               subscribed_topic_regex=regex, topic_partitions=())

    with RawConnection(matrix.bootstrap) as connection:
        assert join(connection, "h", "a.x").error_code == ErrorCode.group_authorization_failed
        assert join(connection, "g", "b.x").error_code == ErrorCode.topic_authorization_failed
        joined = wait_until(lambda: (reply := join(connection, "g", None, "b[.]x")).error_code == ErrorCode.none
                            and reply, 20, message="joined group g")
        assert joined.member_epoch == 1
        described = connection.call(69, 1, group_ids=("g", "h"), include_authorized_operations=False).groups
        assert [d.error_code for d in described] == [ErrorCode.topic_authorization_failed,
                                                     ErrorCode.group_authorization_failed]
        left = connection.call(68, 1, group_id="g", member_id="m1", member_epoch=-1, topic_partitions=None)
        assert left.error_code == ErrorCode.none  # group g is empty again for the classic consumers


def test_each_api_answers_a_refusal_with_its_authorization_code(matrix: BrokerProcess) -> None:
    """Whole-request and per-item refusals, as Kafka answers them: the group's, the
    transactional id's, the cluster's and the topics' *_AUTHORIZATION_FAILED in the fields each
    response carries them (User:ANONYMOUS may only Read group `g`, Describe `tx-open` and the
    cluster, and use topics `a.*`)."""
    group, txn, cluster = (ErrorCode.group_authorization_failed, ErrorCode.transactional_id_authorization_failed,
                           ErrorCode.cluster_authorization_failed)
    with RawConnection(matrix.bootstrap) as connection:
        def call(api_key: int, version: int, **fields: Any) -> Any:
            return connection.call(api_key, version, **fields)

        joined = call(11, 9, group_id="h", session_timeout=timedelta(seconds=10), member_id="m-1",
                      protocol_type="consumer", protocols=())
        assert (joined.error_code, joined.member_id, joined.members) == (group, "m-1", ())
        assert call(12, 4, group_id="h", generation_id=1, member_id="m-1").error_code == group
        assert call(14, 5, group_id="h", generation_id=1, member_id="m-1", assignments=()).error_code == group
        left = call(13, 5, group_id="h", members=(leave_v5.MemberIdentity(member_id="m-1", group_instance_id=None,
                                                                           reason=None),))
        assert (left.error_code, left.members) == (group, ())
        deleted = call(47, 0, group_id="g", topics=(offset_delete_v0.OffsetDeleteRequestTopic(
            name="a.x", partitions=(offset_delete_v0.OffsetDeleteRequestPartition(partition_index=0),)),))
        assert (deleted.error_code, deleted.topics) == (group, ())  # Delete on the group: not granted
        committed = call(8, 9, group_id="h", member_id="", topics=(offset_commit_v9.OffsetCommitRequestTopic(
            name="a.x", partitions=(offset_commit_v9.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=""),)),))
        assert [p.error_code for t in committed.topics for p in t.partitions] == [group]
        assert [r.error_code for r in call(42, 2, groups_names=("g",)).results] == [group]
        assert [g.error_code for g in call(15, 5, groups=("h",), include_authorized_operations=False).groups] == [
            group]
        assert [c.error_code for c in call(10, 4, key_type=0, coordinator_keys=("h",)).coordinators] == [group]
        assert [c.error_code for c in call(10, 4, key_type=1, coordinator_keys=("tx-x",)).coordinators] == [txn]

        assert call(26, 4, transactional_id="tx-open", producer_id=1, producer_epoch=0,
                    committed=True).error_code == txn  # Describe on the id, not Write
        assert call(25, 4, transactional_id="tx-open", producer_id=1, producer_epoch=0,
                    group_id="g").error_code == txn
        assert call(22, 5, transactional_id="tx-open", transaction_timeout=timedelta(seconds=10)).error_code == txn

        elected = call(43, 2, election_type=0, topic_partitions=(elect_v2.TopicPartitions(topic="a.x",
                                                                                          partitions=(0,)),))
        assert (elected.error_code, [p.error_code for r in elected.replica_election_results
                                     for p in r.partition_result]) == (cluster, [cluster])
        assert call(45, 0, topics=()).error_code == cluster
        markers = call(27, 1, markers=(markers_v1.WritableTxnMarker(
            producer_id=1, producer_epoch=0, transaction_result=True, coordinator_epoch=0,
            topics=(markers_v1.WritableTxnMarkerTopic(name="a.x", partition_indexes=(0,)),)),))
        assert [p.error_code for m in markers.markers for t in m.topics for p in t.partitions] == [cluster]
        moved = call(34, 2, dirs=(log_dirs_v2.AlterReplicaLogDir(path="/nowhere", topics=(
            log_dirs_v2.AlterReplicaLogDirTopic(name="a.x", partitions=(0,)),)),))
        assert [p.error_code for r in moved.results for p in r.partitions] == [cluster]
        assert [r.error_code for r in call(31, 3, filters=(delete_acls_v3.DeleteAclsFilter(**ANY_FILTER),))
                .filter_results] == [cluster]

        assert call(76, 1, group_id="h", member_id="m-1", member_epoch=0,
                    subscribed_topic_names=("a.x",)).error_code == group
        unauthorized = call(76, 1, group_id="g", member_id="m-1", member_epoch=0, subscribed_topic_names=("b.x",))
        assert (unauthorized.error_code, unauthorized.error_message) == (
            ErrorCode.topic_authorization_failed, "Unauthorized topics in the subscription.")


def test_share_group_offsets_need_kafkas_acls(matrix: BrokerProcess) -> None:
    """Describe/Alter/DeleteShareGroupOffsets: Describe on the group and the topics, Read on the
    group and the topics, Delete on the group and Read on the topics, as Kafka's handlers check."""
    def offsets(group: str, api_key: int, version: int, topics: tuple[Any, ...], **fields: Any) -> Any:
        return connection.call(api_key, version, group_id=group, topics=topics, **fields)

    with RawConnection(matrix.bootstrap) as connection:
        def joined() -> bool:  # g becomes an empty share group: its member joins and leaves
            connection.call(10, 3, key="g", key_type=0)
            reply = connection.call(76, 1, group_id="g", member_id="s1", member_epoch=0,
                                    subscribed_topic_names=("a.x",))
            return reply.error_code == ErrorCode.none
        wait_until(joined, 30, message="a share group g")
        assert connection.call(76, 1, group_id="g", member_id="s1", member_epoch=-1).error_code == ErrorCode.none
        wanted = tuple(DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=(0,)) for t in ("a.x", "b.x"))
        described = connection.call(90, 1, groups=tuple(DescribeShareGroupOffsetsRequestGroup(group_id=g, topics=wanted)
                                                        for g in ("g", "h"))).groups
        assert [d.error_code for d in described] == [ErrorCode.none, ErrorCode.group_authorization_failed]
        assert [(t.topic_name, t.partitions[0].start_offset, t.partitions[0].error_code) for t in described[0].topics] \
            == [("a.x", -1, ErrorCode.none), ("b.x", -1, ErrorCode.topic_authorization_failed)]
        reset = tuple(AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=(
            AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0),)) for t in ("a.x", "b.x"))
        altered = offsets("g", 91, 0, reset)
        assert [(t.topic_name, t.partitions[0].error_code) for t in altered.responses] == [
            ("a.x", ErrorCode.none), ("b.x", ErrorCode.topic_authorization_failed)]
        assert offsets("h", 91, 0, reset).error_code == ErrorCode.group_authorization_failed
        deleted = offsets("g", 92, 0, (DeleteShareGroupOffsetsRequestTopic(topic_name="a.x"),))
        assert deleted.error_code == ErrorCode.group_authorization_failed  # Delete on the group: not granted
