"""The console's actions on a cluster: topics created, altered, deleted; an empty group's offsets reset.

Each is one AdminClient request, as `logbus topics` and `logbus groups reset-offsets` make it.
A reset refuses a group with members, as kafka-consumer-groups.sh does: a running consumer would
overwrite the new offsets with its own commits.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..client.offset_reset import reset_targets
from .cluster_view import ClusterView, ConsoleError


@dataclass(frozen=True, slots=True)
class ResetRequest:
    group: str
    topic: str
    target: str  # one of offset_reset.TARGETS
    value: int | None = None  # the offset, or the timestamp in ms


class Actions:
    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self.admin_module = view.kafka.admin

    def _done(self, futures: dict, what: str) -> None:
        for future in futures.values():
            self.view.wait(future, what)
        self.view.cache.clear()

    def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]) -> None:
        new_topic = self.admin_module.NewTopic(name, num_partitions=partitions,
                                               replication_factor=replication_factor, config=configs)
        self._done(self.view.admin.create_topics([new_topic], request_timeout=self.view.timeout_s),
                   f"creating topic '{name}'")

    def delete_topic(self, name: str) -> None:
        self.view.topic(name)
        self._done(self.view.admin.delete_topics([name], request_timeout=self.view.timeout_s),
                   f"deleting topic '{name}'")

    def add_partitions(self, name: str, total: int) -> None:
        self.view.topic(name)
        request = [self.admin_module.NewPartitions(name, total)]
        self._done(self.view.admin.create_partitions(request, request_timeout=self.view.timeout_s),
                   f"adding partitions to '{name}'")

    def alter_configs(self, name: str, set_configs: dict[str, str], delete_configs: list[str]) -> None:
        self.view.topic(name)
        module = self.admin_module
        entries = [module.ConfigEntry(key, value, incremental_operation=module.AlterConfigOpType.SET)
                   for key, value in set_configs.items()]
        entries += [module.ConfigEntry(key, None, incremental_operation=module.AlterConfigOpType.DELETE)
                    for key in delete_configs]
        resource = module.ConfigResource(module.ResourceType.TOPIC, name, incremental_configs=entries)
        self._done(self.view.admin.incremental_alter_configs([resource], request_timeout=self.view.timeout_s),
                   f"altering configs of '{name}'")

    def reset_offsets(self, request: ResetRequest) -> dict[tuple[str, int], int]:
        """Commit the new offsets of every partition of `request.topic`; returns them."""
        group = self.view.group(request.group)
        if not group.empty:
            raise ConsoleError(f"group '{request.group}' has {len(group.members)} active member(s) (state "
                               f"{group.state}); stop its consumers before resetting offsets", 409)
        targets = self.reset_targets(request)
        kafka = self.view.kafka
        offsets = kafka.ConsumerGroupTopicPartitions(
            request.group, [kafka.TopicPartition(t, p, offset) for (t, p), offset in targets.items()])
        futures = self.view.admin.alter_consumer_group_offsets([offsets], request_timeout=self.view.timeout_s)
        self._done(futures, f"resetting offsets of group '{request.group}'")
        return targets

    def reset_targets(self, request: ResetRequest) -> dict[tuple[str, int], int]:
        """The new offset per partition, kept within each partition's log (as Kafka's tool keeps them)."""
        keys = [(request.topic, p.id) for p in self.view.topic(request.topic).partitions]
        try:
            return reset_targets(keys, request.target, request.value, self.view.offsets)
        except ValueError as exc:
            raise ConsoleError(str(exc)) from None
