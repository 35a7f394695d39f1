"""The requests the blocking client sends, at fixed versions every Kafka broker since 3.0 serves
(`VERSIONS`), and kio's classes for each (`api_module`, loaded once per API and version).
"""

from __future__ import annotations

from typing import Any

from kio.index import load_payload_module
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

METADATA, LIST_OFFSETS, FETCH = 3, 2, 1
ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 45, 46  # for `logbus reassign`, which shares this client
VERSIONS = {METADATA: 12, LIST_OFFSETS: 7, FETCH: 12, ALTER_REASSIGNMENTS: 0, LIST_REASSIGNMENTS: 0}
# `logbus transactions`' requests (ListTransactions: the version its filters need, up to v2).
FIND_COORDINATOR, WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 10, 27, 61, 65, 66
VERSIONS.update({FIND_COORDINATOR: 3, WRITE_TXN_MARKERS: 1, DESCRIBE_PRODUCERS: 0, DESCRIBE_TRANSACTIONS: 0,
                 LIST_TRANSACTIONS: 0})
# The transactional producer's requests (`logbus.spark.txn_client`; FindCoordinator v3 as above),
# flexible versions Kafka 3.0+ serves.
PRODUCE, OFFSET_FETCH, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = 0, 9, 22, 24, 25, 26
TXN_OFFSET_COMMIT = 28
VERSIONS.update({PRODUCE: 9, OFFSET_FETCH: 7, INIT_PRODUCER_ID: 4, ADD_PARTITIONS_TO_TXN: 3, ADD_OFFSETS_TO_TXN: 3,
                 END_TXN: 3, TXN_OFFSET_COMMIT: 3})

# `logbus share-groups` and the console's share groups: Kafka 4.2's share-group APIs (KIP-932), with
# ListGroups v5 (its type filter) and DeleteGroups v2.
LIST_GROUPS, DELETE_GROUPS, SHARE_GROUP_DESCRIBE = 16, 42, 77
DESCRIBE_SHARE_GROUP_OFFSETS, ALTER_SHARE_GROUP_OFFSETS, DELETE_SHARE_GROUP_OFFSETS = 90, 91, 92
VERSIONS.update({LIST_GROUPS: 5, DELETE_GROUPS: 2, SHARE_GROUP_DESCRIBE: 1, DESCRIBE_SHARE_GROUP_OFFSETS: 1,
                 ALTER_SHARE_GROUP_OFFSETS: 0, DELETE_SHARE_GROUP_OFFSETS: 0})


class ApiModule:
    """The kio classes of one API at one version."""

    def __init__(self, api_key: int, version: int) -> None:
        self.api_key = api_key
        self.version = version
        self.request = load_payload_module(api_key, self.version, EntityType.request)
        self.response = load_payload_module(api_key, self.version, EntityType.response)
        self.request_cls = _entity(self.request, EntityType.request)
        self.response_cls = _entity(self.response, EntityType.response)
        self.write_header = entity_writer(self.request.RequestHeader)
        self.write_body = entity_writer(self.request_cls)
        self.read_header = entity_reader(self.response.ResponseHeader)
        self.read_body = entity_reader(self.response_cls)


def _entity(module: Any, entity_type: EntityType) -> type:
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "__type__", None) is entity_type:
            return value
    raise LookupError(f"no {entity_type.name} in {module.__name__}")


_MODULES: dict[tuple[int, int], ApiModule] = {}


def api_module(api_key: int, version: int | None = None) -> ApiModule:
    """`api_key`'s classes at `version`, by default the one in VERSIONS."""
    key = (api_key, VERSIONS[api_key] if version is None else version)
    if key not in _MODULES:
        _MODULES[key] = ApiModule(*key)
    return _MODULES[key]
