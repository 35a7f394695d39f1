"""Watchers of the configs that change through notifications: ACLs, SCRAM credentials, client
quotas and the dynamic configs of brokers and groups (Kafka's entity configs under /config).

Each watch callback runs on kazoo's thread, reads what changed there and hands the result to the
event loop (`post`), where the store's tables change and its listeners are called.

ACLs: a change is a conditional update of the resource's znode (on its version, retried when
another broker changed it meanwhile), then a change notification. Every broker watches the
notifications and re-reads the resources they name, one after another on kazoo's thread, so each
broker's view of a resource only moves forward; the writer returns once its own view has taken
its notification. Notifications older than 15 minutes are deleted by whichever broker sees them
next, as Kafka's brokers do.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from ..security.acl import (
    AccessControlEntry,
    AclTable,
    PatternType,
    ResourcePattern,
    decode_entries,
    resource_type_named,
)
from ..security.quotas import QuotaConfigs, QuotaEntity, decode_quota_config, desanitize
from ..security.scram import UserCredentials, decode_user_config
from .zk_data import (
    CLIENTS,
    CONFIG_ENTITIES,
    EXTENDED_ACL_CHANGES,
    IPS,
    LITERAL_ACL_CHANGES,
    LITERAL_ACLS,
    PREFIXED_ACLS,
    UNREACHABLE,
    USERS,
    acl_path,
    decode_acl_change,
    read_entity_config,
)
from .zk_reads import SerialDataWatch

log = logging.getLogger(__name__)

ACL_CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # Kafka's: older notifications are deleted by any broker
Post = Callable[..., None]  # runs `callback(*args)` on the event loop, from a kazoo thread


class AclWatcher:
    """The ACL change notifications of every broker: each names a resource whose ACLs are read
    again; `seen_acl_changes` are the notifications this view has taken."""

    def __init__(self, client: KazooClient, post: Post, acls: Callable[[], AclTable],
                 apply_acls: Callable[[AclTable], None], changed: Callable[[], None]) -> None:
        self._client = client
        self._post = post
        self._acls = acls
        self._apply_acls = apply_acls
        self._view_changed = changed
        self.seen_acl_changes: set[str] = set()  # notification paths this view has taken

    def watch(self) -> None:
        """Watch both kinds of notification; those there now are covered by `read_all_acls`."""
        for root in (LITERAL_ACL_CHANGES, EXTENDED_ACL_CHANGES):
            initial = self._client.get_children(root)
            self.seen_acl_changes.update(f"{root}/{child}" for child in initial)  # the full read covers them
            ChildrenWatch(self._client, root, lambda children, r=root: self._on_acl_changes(r, children))

    def read_all_acls(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        """Every ACL znode (worker thread, at start-up)."""
        table = {}
        for root, pattern_type in ((LITERAL_ACLS, PatternType.LITERAL), (PREFIXED_ACLS, PatternType.PREFIXED)):
            for type_name in self._client.get_children(root):
                try:
                    resource_type = resource_type_named(type_name)
                except ValueError:
                    continue
                for name in self._client.get_children(f"{root}/{type_name}"):
                    pattern = ResourcePattern(resource_type, name, pattern_type)
                    entries = self._read_acls(pattern)
                    if entries:
                        table[pattern] = entries
        return table

    def _read_acls(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        try:
            raw, _ = self._client.get(acl_path(pattern))
            return decode_entries(json.loads(raw))
        except NoNodeError:
            return frozenset()
        except ValueError:
            log.warning("unreadable ACLs at %s", acl_path(pattern))
            return frozenset()

    def _on_acl_changes(self, root: str, children: list[str]) -> None:
        """New change notifications: re-read the resources they name (kazoo thread, in order);
        then delete those older than ACL_CHANGE_EXPIRATION_MS, as Kafka's brokers do."""
        paths = [f"{root}/{child}" for child in sorted(children)]
        self._post(self._forget_acl_changes, root, frozenset(paths))
        for path in paths:
            if path in self.seen_acl_changes:
                continue
            try:
                raw, _ = self._client.get(path)
                pattern = decode_acl_change(root, raw)
            except NoNodeError:
                continue
            except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                log.warning("ignoring an unreadable ACL change notification %s", path)
                self._post(self.seen_acl_changes.add, path)
                continue
            self._post(self._apply_resource_acls, pattern, self._read_acls(pattern), path)
        self._purge_acl_changes(paths)

    def _purge_acl_changes(self, paths: list[str]) -> None:
        oldest_kept = time.time() * 1000 - ACL_CHANGE_EXPIRATION_MS
        for path in paths:
            try:
                stat = self._client.exists(path)
                if stat is not None and stat.ctime < oldest_kept:
                    self._client.delete(path)
            except (NoNodeError, *UNREACHABLE):
                continue  # another broker purged it first, or the next notification's callback will

    def _forget_acl_changes(self, root: str, current: frozenset[str]) -> None:
        """Keep only the notifications of `root` that still exist in the set of those taken."""
        self.seen_acl_changes = {p for p in self.seen_acl_changes if not p.startswith(f"{root}/") or p in current}

    def _apply_resource_acls(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry],
                             notification: str) -> None:
        table = {p: e for p, e in self._acls().items() if p != pattern}
        if entries:
            table[pattern] = entries
        self.seen_acl_changes.add(notification)
        self._apply_acls(table)
        self._view_changed()


class EntityConfigWatcher:
    """SCRAM credentials and quotas (/config/users, /config/clients, /config/ips) and the dynamic
    configs of brokers and groups (/config/brokers, /config/groups): a data watch per entity."""

    def __init__(self, client: KazooClient, post: Post, apply_entity_config: Callable[[str, dict[str, str]], None],
                 changed: Callable[[], None]) -> None:
        self._client = client
        self._post = post
        self._apply_entity_config = apply_entity_config
        self._view_changed = changed
        self.users: UserCredentials = {}
        self._watched_users: set[str] = set()
        self.quotas: QuotaConfigs = {}

    def watch(self) -> None:
        """Read every entity's configs and watch for changes (kazoo thread)."""
        ChildrenWatch(self._client, USERS, self._on_user_names)
        self._watch_quota_entities(CLIENTS, lambda name: QuotaEntity(None, name))
        self._watch_quota_entities(IPS, lambda name: QuotaEntity(ip=name))
        for kind in CONFIG_ENTITIES:
            self._watch_config_entities(kind)

    def _on_user_names(self, children: list[str]) -> None:
        """Each user znode gets a data watch: a credential altered on any broker (or by
        `logbus users`, which also writes Kafka's /config/changes notification) reaches every
        broker's view within a watch round trip."""
        for name in children:
            if name not in self._watched_users:
                self._watched_users.add(name)
                SerialDataWatch(self._client, f"{USERS}/{name}", lambda data, *_a, n=name: self._on_user(n, data))
                self._watch_user_clients(name)
        for name in self._watched_users - set(children):
            self._watched_users.discard(name)
            self._post(self._apply_user, desanitize(name), {})
            self._post(self._apply_quotas, QuotaEntity(desanitize(name), None), {})

    def _on_user(self, name: str, data: bytes | None) -> bool:
        if name not in self._watched_users:
            return False
        try:
            config = read_entity_config(data)
            credentials = decode_user_config(config)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("user %s: unreadable credentials in ZooKeeper: %s", name, exc)
            return True
        self._post(self._apply_user, desanitize(name), credentials)
        self._post(self._apply_quotas, QuotaEntity(desanitize(name), None), decode_quota_config(config))
        return True

    def _apply_user(self, name: str, credentials: dict[str, Any]) -> None:
        users = {user: found for user, found in self.users.items() if user != name}
        if credentials:
            users[name] = credentials
        self.users = users
        self._view_changed()

    def _watch_user_clients(self, user: str) -> None:
        """/config/users/<user>/clients may come and go: its children are watched while it exists."""
        parent = f"{USERS}/{user}/clients"
        watching = False

        def on_parent(data: bytes | None, *_args: object) -> bool:
            nonlocal watching
            if user not in self._watched_users:
                return False
            if data is not None and not watching:
                watching = True
                self._watch_quota_entities(parent, lambda name: QuotaEntity(desanitize(user), name))
            watching = watching and data is not None
            return True

        DataWatch(self._client, parent, on_parent)

    def _watch_quota_entities(self, parent: str, entity_of: Callable[[str], QuotaEntity]) -> None:
        """Watch the children of `parent` as quota entities (`entity_of` their sanitized names)."""

        def on_data(name: str, data: bytes | None) -> None:
            entity = entity_of(desanitize(name))
            try:
                quotas = decode_quota_config(read_entity_config(data), entity.keys)
            except (ValueError, TypeError, AttributeError) as exc:
                log.warning("%s/%s: unreadable quotas in ZooKeeper: %s", parent, name, exc)
                return
            self._post(self._apply_quotas, entity, quotas)

        def on_gone(name: str) -> None:
            self._post(self._apply_quotas, entity_of(desanitize(name)), {})

        self._watch_children_data(parent, on_data, on_gone)

    def _watch_config_entities(self, kind: str) -> None:
        """Watch /config/<kind>/<name> znodes (names sanitized as Kafka's Sanitizer does) as the
        dynamic configs of entity `<kind>/<name>`."""

        def on_data(name: str, data: bytes | None) -> None:
            try:
                configs = {key: str(value) for key, value in read_entity_config(data).items()}
            except (ValueError, TypeError, AttributeError) as exc:
                log.warning("/config/%s/%s: unreadable configs in ZooKeeper: %s", kind, name, exc)
                return
            self._post(self._apply_entity_config_seen, f"{kind}/{desanitize(name)}", configs)

        def on_gone(name: str) -> None:
            self._post(self._apply_entity_config_seen, f"{kind}/{desanitize(name)}", {})

        self._watch_children_data(f"/config/{kind}", on_data, on_gone)

    def _watch_children_data(self, parent: str, on_data: Callable[[str, bytes | None], None],
                             on_gone: Callable[[str], None]) -> None:
        """Watch `parent`'s children and the data of each (kazoo threads): `on_data(name, data)`
        at every change of a child's data, `on_gone(name)` when a child is removed."""
        watched: set[str] = set()

        def on_children(children: list[str]) -> None:
            for name in children:
                if name not in watched:
                    watched.add(name)
                    SerialDataWatch(self._client, f"{parent}/{name}", lambda data, *_a, n=name: seen(n, data))
            for name in watched - set(children):
                watched.discard(name)
                on_gone(name)

        def seen(name: str, data: bytes | None) -> bool:
            if name not in watched:
                return False  # removed: stop watching it
            on_data(name, data)
            return True

        ChildrenWatch(self._client, parent, on_children)

    def _apply_entity_config_seen(self, entity: str, configs: dict[str, str]) -> None:
        self._apply_entity_config(entity, configs)
        self._view_changed()

    def _apply_quotas(self, entity: QuotaEntity, values: dict[str, float]) -> None:
        if self.quotas.get(entity, {}) == values:
            return
        quotas = {e: found for e, found in self.quotas.items() if e != entity}
        if values:
            quotas[entity] = values
        self.quotas = quotas
        self._view_changed()
