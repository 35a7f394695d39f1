"""Kafka's ZooKeeper-mode znodes: their paths, and the JSON in them, encoded and decoded.

Pure functions and names, no ZooKeeper session: the store's writes (`zk_writes`), its watched
view (`zk_view`) and its change watchers (`zk_watchers`) all read and write through these.

Layout (JSON as Kafka writes it, so an operator who knows Kafka recognises it):

- `/cluster/id`                                   {"version":"1","id":...}
- `/brokers/ids/<id>`  (ephemeral)                {"version":5,"host","port","endpoints",...,"rack"}
- `/brokers/topics/<t>`                           {"version":3,"topic_id","partitions":{"0":[1,2]},
                                                   "adding_replicas":{},"removing_replicas":{}}
- `/brokers/topics/<t>/partitions/<p>/state`      {"controller_epoch","leader","version":1,"leader_epoch","isr"}
- `/config/topics/<t>`                            {"version":1,"config":{...}}
- `/config/users/<user>`                          {"version":1,"config":{"SCRAM-SHA-256":"salt=...,..."}}
- `/config/users/<user>/clients/<client-id>`      {"version":1,"config":{"producer_byte_rate":"1048576"}}
- `/config/clients/<client-id>`                   the same; quotas also in /config/users/<user>, and
                                                   `<default>` for a user or client id (KIP-55)
- `/config/ips/<ip>`                              {"version":1,"config":{"connection_creation_rate":"10"}},
                                                   `<default>` for every other address (KIP-612)
- `/config/brokers/<id>`, `/config/brokers/<default>`  {"version":1,"config":{...}}: dynamic broker configs,
                                                   one broker's and the cluster-wide default (KIP-226)
- `/config/groups/<group>`                        {"version":1,"config":{...}}: KIP-848 group configs
                                                   (logbus's path: Kafka keeps them only in KRaft metadata)
- `/config/changes/config_change_<seq>`           {"version":2,"entity_path":"topics/<t>", "users/<user>",
                                                   "clients/<c>", "users/<user>/clients/<c>", "ips/<ip>",
                                                   "brokers/<id>" or "groups/<group>"}
- `/admin/delete_topics/<t>`                      a deletion the controller carries out
- `/admin/preferred_replica_election`             {"version":1,"partitions":[{"topic","partition"}]}
- `/admin/reassign_partitions`                    {"version":1,"partitions":[{"topic","partition","replicas"}]}
- `/controller` (ephemeral), `/controller_epoch`, `/latest_producer_id_block`
- `/logbus/controlled_shutdown/<id>` (ephemeral)  logbus's own: a broker asking to lose its leaderships
- `/logbus/state_changes/change_<seq>`            logbus's own: {"version":1,"partitions":[[topic, partition,
                                                   leader, leader_epoch, isr, znode_version]]}, the states
                                                   one write changed (see "State changes" in `zk_view`)
- `/logbus/offline_replicas/<id>-<seq>`           logbus's own: {"version":1,"partitions":[{"topic","partition"}]},
                                                   a broker's replicas in failed log dirs (replaced whole)
- `/log_dir_event_notification/log_dir_event_<seq>`  {"version":1,"broker":<id>,"event":1}: a log dir failed
- `/kafka-acl/<ResourceType>/<name>`              LITERAL ACLs {"version":1,"acls":[{"principal","permissionType",
                                                   "operation","host"}]}
- `/kafka-acl-extended/prefixed/<ResourceType>/<name>`  PREFIXED ACLs, the same JSON
- `/kafka-acl-changes/acl_changes_<seq>`          "Topic:name": a LITERAL resource's ACLs changed
- `/kafka-acl-extended-changes/acl_changes_<seq>` {"version":1,"resourceType","name","patternType"}: a PREFIXED one
"""

from __future__ import annotations

import json
import time
from typing import Any

from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

from ..security.acl import RESOURCE_TYPE_NAMES, PatternType, ResourcePattern, resource_type_named
from ..security.listeners import DEFAULT_PROTOCOL_MAP, ListenerEndpoint, parse_endpoints, parse_protocol_map
from ..security.scram import decode_user_config
from .metadata import BrokerInfo, PartitionState

UNREACHABLE = (ConnectionLoss, ConnectionClosedError, SessionExpiredError, KazooTimeoutError)

CONTROLLED_SHUTDOWN = "/logbus/controlled_shutdown"  # children: brokers asking to lose their leaderships
STATE_CHANGES = "/logbus/state_changes"  # children: batches of partition states written, for every broker
STATE_CHANGE_PREFIX = "change_"
OFFLINE_REPLICAS = "/logbus/offline_replicas"  # children: brokers' replicas in failed log dirs
LOG_DIR_EVENTS = "/log_dir_event_notification"  # Kafka's: tells the controller a log dir failed
LOG_DIR_FAILURE = 1  # Kafka's LogDirEventNotification event type
USERS = "/config/users"
CLIENTS = "/config/clients"
IPS = "/config/ips"
CONFIG_ENTITIES = ("brokers", "groups")  # /config/<kind>/<name>: dynamic configs of brokers and groups


LITERAL_ACLS, PREFIXED_ACLS = "/kafka-acl", "/kafka-acl-extended/prefixed"
LITERAL_ACL_CHANGES, EXTENDED_ACL_CHANGES = "/kafka-acl-changes", "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"


def acl_path(pattern: ResourcePattern) -> str:
    root = PREFIXED_ACLS if pattern.pattern_type is PatternType.PREFIXED else LITERAL_ACLS
    return f"{root}/{RESOURCE_TYPE_NAMES[pattern.resource_type]}/{pattern.name}"


def encode_acl_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    """(notification path prefix, data) announcing that `pattern`'s ACLs changed, as Kafka writes it."""
    if pattern.pattern_type is PatternType.LITERAL:
        return (f"{LITERAL_ACL_CHANGES}/{ACL_CHANGE_PREFIX}",
                f"{RESOURCE_TYPE_NAMES[pattern.resource_type]}:{pattern.name}".encode())
    return (f"{EXTENDED_ACL_CHANGES}/{ACL_CHANGE_PREFIX}",
            encode_json({"version": 1, "resourceType": pattern.resource_type.name, "name": pattern.name,
                   "patternType": pattern.pattern_type.name}))


def decode_acl_change(root: str, raw: bytes) -> ResourcePattern:
    """The resource pattern a change notification names; ValueError when it names none."""
    if root == LITERAL_ACL_CHANGES:
        type_name, sep, name = raw.decode().partition(":")
        if not sep:
            raise ValueError(f"not a resource: {raw[:100]!r}")
        return ResourcePattern(resource_type_named(type_name), name, PatternType.LITERAL)
    value = json.loads(raw)
    return ResourcePattern(resource_type_named(value["resourceType"]), value["name"],
                           PatternType[value["patternType"].upper()])


def topic_path(name: str) -> str:
    return f"/brokers/topics/{name}"


def state_path(name: str, index: int) -> str:
    return f"/brokers/topics/{name}/partitions/{index}/state"


def encode_json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def encode_state(state: PartitionState, controller_epoch: int) -> bytes:
    return encode_json({"controller_epoch": controller_epoch, "leader": state.leader, "version": 1,
                  "leader_epoch": state.leader_epoch, "isr": state.isr})


def decode_state(raw: bytes) -> tuple[int, int, list[int]]:
    """(leader, leader epoch, ISR) of a partition-state znode (ValueError/KeyError/TypeError
    when it is not one)."""
    state = json.loads(raw)
    return int(state["leader"]), int(state["leader_epoch"]), [int(b) for b in state["isr"]]


StateEntry = tuple[str, int, int, int, list[int], int]  # topic, index, leader, leader epoch, ISR, znode version


def encode_state_changes(entries: list[StateEntry]) -> bytes:
    """A STATE_CHANGES znode: the states one multi-op wrote, with the versions it gave their znodes."""
    return encode_json({"version": 1, "partitions": [list(entry) for entry in entries]})


def decode_state_changes(raw: bytes) -> list[StateEntry]:
    """The states in a STATE_CHANGES znode (ValueError/KeyError/TypeError/IndexError when it is not one)."""
    return [(str(t), int(i), int(leader), int(epoch), [int(b) for b in isr], int(version))
            for t, i, leader, epoch, isr, version in json.loads(raw)["partitions"]]


def encode_assignment(topic_id: str, partitions: list[PartitionState]) -> bytes:
    return encode_json({
        "version": 3, "topic_id": topic_id,
        "partitions": {str(i): p.replicas for i, p in enumerate(partitions)},
        "adding_replicas": {str(i): p.adding_replicas for i, p in enumerate(partitions) if p.adding_replicas},
        "removing_replicas": {str(i): p.removing_replicas for i, p in enumerate(partitions) if p.removing_replicas},
    })


def encode_broker(broker: BrokerInfo) -> bytes:
    """Kafka's broker registration: every advertised endpoint with its listener's protocol, and
    host/port of the PLAINTEXT one (null and -1 without one), which pre-listener tools read."""
    plaintext = next((e for e in broker.endpoints if e.security_protocol == "PLAINTEXT"), None)
    value: dict[str, Any] = {
        "listener_security_protocol_map": {e.name: e.security_protocol for e in broker.endpoints},
        "endpoints": [str(e) for e in broker.endpoints], "jmx_port": -1, "features": {},
        "host": plaintext.host if plaintext else None, "timestamp": str(int(time.time() * 1000)),
        "port": plaintext.port if plaintext else -1, "version": 5,
    }
    if broker.rack:
        value["rack"] = broker.rack
    return encode_json(value)


def decode_broker(broker_id: int, raw: bytes) -> BrokerInfo:
    """A registration (ValueError/KeyError/TypeError when it is not one); without `endpoints`,
    host/port as a PLAINTEXT listener, as registrations from before listeners were."""
    value = json.loads(raw)
    protocols = value.get("listener_security_protocol_map") or {}
    if value.get("endpoints"):
        endpoints = parse_endpoints("endpoints", ",".join(value["endpoints"]),
                                    protocols or parse_protocol_map(DEFAULT_PROTOCOL_MAP))
    else:
        endpoints = (ListenerEndpoint("PLAINTEXT", "PLAINTEXT", value["host"], int(value["port"])),)
    return BrokerInfo(broker_id, endpoints, value.get("rack"))


def read_entity_config(data: bytes | None) -> dict[str, str]:
    """The config map in an entity znode's data ({} for an empty znode, as a parent created on the way)."""
    if not data:
        return {}
    return dict(json.loads(data).get("config") or {})


def read_user_credentials(data: bytes | None) -> dict[str, Any]:
    """The SCRAM credentials in a /config/users/<user> znode's data ({} for none)."""
    return decode_user_config(read_entity_config(data))
