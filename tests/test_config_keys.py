"""Every declared config key has an effect, proved by a named test, or is documented as having none.

`EFFECT_TESTS` maps each broker and topic key to the tests that would fail if the key did nothing
("file.py::test_name"; a broker key that is a synonym of a topic key is proved by
`test_broker_synonyms_set_the_topic_defaults` together with the topic key's own tests).
`ACCEPTED_WITHOUT_EFFECT` lists the keys logbus takes (so that Kafka's server.properties and the
clients' test suites work) but that change nothing yet, each with the reason docs/configuration.md
gives. A key in neither fails `test_every_declared_key_is_accounted_for`.
"""

from __future__ import annotations

import ast
import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from helpers import QUIET, RawConnection, wait_until
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v9.request import JoinGroupRequestProtocol

from logbus.broker.broker import Broker
from logbus.config import BROKER_KEYS, TOPIC_KEYS, BrokerConfig
from logbus.security.listeners import ListenerSettings
from logbus.testing import BrokerProcess, running_broker

TESTS = Path(__file__).resolve().parent
LOOPBACK = ListenerSettings.plaintext("127.0.0.1", 0)
FIND_COORDINATOR, JOIN_GROUP = 10, 11
FUTURE_TIMEOUT_S = 15
SYNONYMS = "test_config_keys.py::test_broker_synonyms_set_the_topic_defaults"
KAFKA_TOPIC_KEYS = "test_config_keys.py::test_kafka_41_topic_keys_are_accepted_validated_and_described"
LISTENERS = "test_config_keys.py::test_serve_takes_listeners_and_log_dir_from_server_properties"
QUOTA_WINDOWS = "test_quotas.py::test_a_throttled_produce_carries_kafkas_throttle_time_and_mutes_only_its_connection"
MUTATION_WINDOWS = "test_quotas.py::test_controller_mutation_rate_refuses_strict_versions_and_throttles_older_ones"
# The storage part of issue 11 gives these their effect; the lead names its tests here when merging.

EFFECT_TESTS: dict[str, tuple[str, ...]] = {
    # broker keys
    "broker.id": (LISTENERS,),
    "log.dirs": ("test_config_keys.py::test_serve_prefers_log_dirs_over_log_dir",
                 "test_log_dirs.py::test_log_dirs_spread_partitions_and_survive_a_restart"),
    "log.dir": (LISTENERS,),
    "listeners": (LISTENERS,),
    "advertised.listeners": ("test_config_keys.py::test_metadata_advertises_host_and_port",
                             "test_listeners.py::test_a_broker_serves_clients_on_each_listener_and_answers_its_addresses"),
    "listener.security.protocol.map": (
        "test_listeners.py::test_a_broker_serves_clients_on_each_listener_and_answers_its_addresses",
        "test_listeners.py::test_serve_refuses_a_bad_listener_config_with_exit_code_2"),
    "inter.broker.listener.name": ("test_listeners.py::test_a_cluster_replicates_over_its_inter_broker_listener",),
    "ssl.keystore.type": ("test_tls.py::test_listener_prefixed_ssl_keys_win_and_bad_tls_configs_are_refused",),
    "ssl.keystore.location": ("test_tls.py::test_confluent_kafka_produces_and_consumes_over_tls",),
    "ssl.keystore.certificate.chain": (
        "test_tls.py::test_listener_prefixed_ssl_keys_win_and_bad_tls_configs_are_refused",),
    "ssl.keystore.key": ("test_tls.py::test_listener_prefixed_ssl_keys_win_and_bad_tls_configs_are_refused",),
    "ssl.key.password": ("test_tls.py::test_an_encrypted_key_needs_its_password",),
    "ssl.truststore.type": ("test_tls.py::test_cipher_suites_truststore_type_and_host_name_checks_are_configurable",),
    "ssl.truststore.location": ("test_tls.py::test_mutual_tls_required_refuses_clients_without_a_trusted_certificate",),
    "ssl.client.auth": ("test_tls.py::test_mutual_tls_required_refuses_clients_without_a_trusted_certificate",
                        "test_tls.py::test_listener_prefixed_ssl_keys_win_and_bad_tls_configs_are_refused"),
    "ssl.enabled.protocols": ("test_tls.py::test_mutual_tls_required_refuses_clients_without_a_trusted_certificate",),
    "ssl.cipher.suites": ("test_tls.py::test_cipher_suites_truststore_type_and_host_name_checks_are_configurable",),
    "ssl.principal.mapping.rules": (
        "test_tls.py::test_mutual_tls_required_refuses_clients_without_a_trusted_certificate",),
    "ssl.endpoint.identification.algorithm": (
        "test_tls.py::test_cipher_suites_truststore_type_and_host_name_checks_are_configurable",),
    "security.inter.broker.protocol": (
        "test_listeners.py::test_the_inter_broker_listener_is_named_or_follows_the_inter_broker_protocol",),
    "sasl.enabled.mechanisms": ("test_sasl.py::test_a_disabled_mechanism_is_refused_with_the_list_then_closed",
                                "test_sasl.py::test_the_default_mechanisms_are_scram_only",
                                "test_sasl.py::test_each_listener_offers_and_accepts_its_own_mechanisms"),
    "connection.failed.authentication.delay.ms": (
        "test_sasl.py::test_password_guessing_is_slowed_and_others_keep_being_served",
        "test_sasl.py::test_legacy_v0_wrong_password_closes_after_the_delay"),
    "connections.max.reauth.ms": ("test_sasl.py::test_session_lifetime_is_announced_and_an_expired_session_is_closed",),
    "sasl.mechanism.inter.broker.protocol": (
        "test_sasl.py::test_a_cluster_replicates_over_a_sasl_inter_broker_listener",
        "test_sasl.py::test_serve_refuses_a_sasl_inter_broker_listener_without_a_usable_login"),
    "sasl.jaas.config": ("test_sasl.py::test_a_broker_alone_may_have_only_a_sasl_listener",),
    "sasl.server.max.receive.size": (
        "test_sasl.py::test_an_oversized_token_before_authentication_closes_the_connection",),
    "quota.window.num": (QUOTA_WINDOWS,),
    "quota.window.size.seconds": (QUOTA_WINDOWS,),
    "controller.quota.window.num": (MUTATION_WINDOWS,),
    "controller.quota.window.size.seconds": (MUTATION_WINDOWS,),
    "num.partitions": ("test_cli.py::test_partition_and_offset",),
    "auto.create.topics.enable": ("test_cli.py::test_unknown_topic_with_auto_create_disabled",),
    "delete.topic.enable": ("test_config_keys.py::test_delete_topic_enable_false_refuses_deletion",),
    "log.segment.bytes": (
        "test_storage.py::test_broker_level_retention_and_segment_defaults_apply_to_auto_created_topics",
    ),
    "log.roll.hours": (SYNONYMS,),
    "log.roll.ms": (SYNONYMS,),
    "log.retention.hours": (SYNONYMS, "test_admin.py::test_describe_configs_defaults_sources_and_synonyms"),
    "log.retention.minutes": (
        "test_storage.py::test_broker_level_retention_and_segment_defaults_apply_to_auto_created_topics",
    ),
    "log.retention.ms": ("test_compaction.py::test_compact_delete_also_applies_retention",),
    "log.retention.bytes": (SYNONYMS,),
    "log.retention.check.interval.ms": (
        "test_storage.py::test_retention_bytes_keeps_the_log_under_the_limit",
        "test_config_keys.py::test_upkeep_intervals_come_from_their_keys",
    ),
    "log.flush.interval.messages": (SYNONYMS,),
    "log.flush.interval.ms": (SYNONYMS,),
    "log.flush.scheduler.interval.ms": (SYNONYMS, "test_config_keys.py::test_upkeep_intervals_come_from_their_keys"),
    "log.index.interval.bytes": (SYNONYMS,),
    "log.index.size.max.bytes": (SYNONYMS,),
    "log.cleanup.policy": (SYNONYMS, "test_compaction.py::test_compact_delete_also_applies_retention"),
    "log.message.timestamp.type": (SYNONYMS,),
    "log.cleaner.delete.retention.ms": (SYNONYMS,),
    "log.cleaner.min.cleanable.ratio": (SYNONYMS,),
    "log.cleaner.min.compaction.lag.ms": (SYNONYMS,),
    "log.cleaner.max.compaction.lag.ms": (SYNONYMS,),
    "log.cleaner.backoff.ms": ("test_config_keys.py::test_upkeep_intervals_come_from_their_keys",),
    "message.max.bytes": ("test_bad_requests.py::test_batch_over_the_size_limit_is_message_too_large",),
    "socket.request.max.bytes": ("test_bad_requests.py::test_frame_just_under_the_limit_is_served",),
    "max.request.partition.size.limit": (
        "test_topic_partitions_and_config_resources.py::test_the_limit_is_capped_by_max_request_partition_size_limit",
    ),
    "socket.sendfile": ("test_storage.py::test_sendfile_is_for_readers_off_this_host",),
    "max.partitions": ("test_metadata_changes.py::test_max_partitions_bounds_the_partitions_a_broker_hosts",),
    "log.segment.delete.delay.ms": (SYNONYMS,),
    "log.flush.start.offset.checkpoint.interval.ms": (
        "test_storage_config.py::test_log_flush_start_offset_checkpoint_interval_ms_sets_when_log_starts_are_checkpointed",
        "test_config_keys.py::test_upkeep_intervals_come_from_their_keys",
    ),
    "queued.max.request.bytes": (
        "test_connections.py::test_queued_max_request_bytes_stops_reading_until_the_bytes_drain",
    ),
    "max.connections": ("test_connections.py::test_max_connections_closes_new_connections_over_the_limit",),
    "max.connections.per.ip": ("test_connections.py::test_max_connections_per_ip_counts_each_address_apart",),
    "max.incremental.fetch.session.cache.slots": (
        "test_fetch_sessions.py::test_a_broker_without_session_slots_answers_every_fetch_in_full",
    ),
    "max.connection.creation.rate": (
        "test_connection_quotas.py::test_the_broker_rate_delays_connections_and_refuses_none",
    ),
    "connections.max.idle.ms": (
        "test_connections.py::test_idle_connections_are_closed_after_connections_max_idle_ms",
    ),
    "log.message.timestamp.before.max.ms": ("test_validation.py::test_broker_defaults_take_effect",),
    "log.message.timestamp.after.max.ms": ("test_validation.py::test_broker_defaults_take_effect",),
    "compression.type": (
        "test_validation.py::test_topic_compression_type_recompresses",
        "test_validation.py::test_broker_defaults_take_effect",
    ),
    **{f"compression.{codec}.level": (
        "test_validation.py::test_topic_compression_level_is_the_level_the_broker_recompresses_at",
    ) for codec in ("gzip", "lz4", "zstd")},
    "offsets.topic.num.partitions": (
        "test_compaction.py::test_consumer_offsets_are_compacted_and_load_after_a_restart",
    ),
    "offsets.topic.segment.bytes": (
        "test_compaction.py::test_consumer_offsets_are_compacted_and_load_after_a_restart",
    ),
    "offsets.retention.minutes": ("test_groups.py::test_offsets_with_retention_time_expire_and_the_empty_group_goes",),
    "offsets.retention.check.interval.ms": (
        "test_groups.py::test_offsets_with_retention_time_expire_and_the_empty_group_goes",
    ),
    "default.replication.factor": ("test_config_keys.py::test_default_replication_factor_is_what_create_topics_uses",),
    "group.min.session.timeout.ms": ("test_config_keys.py::test_group_session_timeout_bounds",),
    "group.max.session.timeout.ms": ("test_config_keys.py::test_group_session_timeout_bounds",),
    "group.max.size": ("test_config_keys.py::test_group_max_size_refuses_one_member_too_many",),
    "group.initial.rebalance.delay.ms": (
        "test_config_keys.py::test_group_initial_rebalance_delay_holds_a_new_groups_first_join",
    ),
    "producer.id.expiration.ms": ("test_storage.py::test_idle_idempotent_producers_expire",),
    "log.flush.offset.checkpoint.interval.ms": (
        "test_storage.py::test_flush_policy_advances_the_recovery_point",
        "test_config_keys.py::test_upkeep_intervals_come_from_their_keys",
    ),
    "log.cleaner.enable": ("test_config_keys.py::test_log_cleaner_enable_false_starts_no_cleaner",),
    "logbus.io.threads": ("test_config_keys.py::test_logbus_io_threads_sizes_the_blocking_io_pool",),
    "logbus.open.segments.max": ("test_config_keys.py::test_logbus_open_segments_max_is_the_descriptor_budget",
                                 "test_storage_unit.py::test_three_thousand_partitions_work_within_a_small_descriptor_budget"),
    "metrics.port": (
        "test_metrics.py::test_the_endpoint_is_off_without_metrics_port_and_binds_metrics_host_with_it",
        "test_metrics.py::test_produced_records_and_bytes_move_the_counters_by_exactly_what_was_produced",
    ),
    "metrics.host": ("test_metrics.py::test_the_endpoint_is_off_without_metrics_port_and_binds_metrics_host_with_it",),
    # topic keys
    "cleanup.policy": ("test_compaction.py::test_compact_delete_also_applies_retention",),
    "retention.ms": ("test_compaction.py::test_compact_delete_also_applies_retention",),
    "retention.bytes": ("test_storage.py::test_retention_bytes_keeps_the_log_under_the_limit",),
    "segment.bytes": ("test_admin.py::test_config_changes_reach_the_live_log",),
    "segment.ms": ("test_storage.py::test_segments_roll_by_time",),
    "segment.index.bytes": ("test_config_keys.py::test_a_full_offset_index_rolls_the_segment",),
    "max.message.bytes": ("test_bad_requests.py::test_batch_over_the_size_limit_is_message_too_large",),
    "message.timestamp.type": ("test_client_compat.py::test_log_append_time_topics_are_found_by_the_brokers_time",),
    "message.timestamp.before.max.ms": ("test_validation.py::test_topic_timestamp_bounds_take_effect",),
    "message.timestamp.after.max.ms": (
        "test_validation.py::test_topic_timestamp_bounds_take_effect",
        "test_validation.py::test_future_timestamps_beyond_the_default_hour_are_invalid_timestamp",
    ),
    "flush.messages": ("test_storage.py::test_flush_policy_advances_the_recovery_point",),
    "flush.ms": ("test_storage.py::test_flush_policy_advances_the_recovery_point",),
    "index.interval.bytes": ("test_storage.py::test_on_disk_layout_uses_kafka_formats",),
    "delete.retention.ms": ("test_compaction.py::test_latest_record_per_key_survives_with_its_offset",),
    "min.cleanable.dirty.ratio": ("test_compaction.py::test_min_cleanable_dirty_ratio_decides_when_a_log_is_cleaned",),
    "min.compaction.lag.ms": ("test_compaction.py::test_min_compaction_lag_keeps_young_records",),
    "max.compaction.lag.ms": (
        "test_compaction.py::test_max_compaction_lag_rolls_the_active_segment_and_cleans_below_the_dirty_ratio",
    ),
    "min.insync.replicas": ("test_config_keys.py::test_min_insync_replicas_above_the_isr_refuses_acks_all",),
    "file.delete.delay.ms": (
        "test_storage_unit.py::test_file_delete_delay_ms_keeps_removed_segments_as_deleted_files_until_it_passes",
    ),
    "remote.storage.enable": (KAFKA_TOPIC_KEYS,),  # true is refused: no tiered storage, as Kafka without it
    "leader.replication.throttled.replicas": (KAFKA_TOPIC_KEYS,),  # validated, stored, described
    "follower.replication.throttled.replicas": (KAFKA_TOPIC_KEYS,),
    # the cluster (issue 12)
    "zookeeper.connect": ("test_cluster.py::test_every_broker_describes_the_cluster_and_replicas_are_byte_identical",),
    "zookeeper.session.timeout.ms": (
        "test_cluster.py::test_a_killed_leader_is_replaced_from_the_isr_and_nothing_acknowledged_is_lost",),
    "zookeeper.connection.timeout.ms": ("test_cluster.py::test_an_unreachable_zookeeper_stops_the_broker_in_time",),
    "broker.rack": ("test_cluster.py::test_racks_are_advertised_and_replicas_spread_over_them",
                    "test_fetch_from_follower.py::test_the_leader_names_the_replica_in_the_consumers_rack_and_sends_no_records"),
    "replica.selector.class": (
        "test_fetch_from_follower.py::test_the_leader_names_the_replica_in_the_consumers_rack_and_sends_no_records",
        "test_fetch_from_follower.py::test_a_librdkafka_consumer_reads_from_its_rack_and_goes_on_when_that_follower_dies",
    ),
    "controlled.shutdown.enable": ("test_cluster.py::test_a_rolling_restart_under_acks_all_load_fails_no_send",),
    "controlled.shutdown.max.retries": (
        "test_cluster_restart.py::test_a_controlled_shutdown_nobody_carries_out_asks_again_max_retries_times_then_stops",),
    "controlled.shutdown.retry.backoff.ms": (
        "test_cluster_restart.py::test_a_controlled_shutdown_nobody_carries_out_asks_again_max_retries_times_then_stops",),
    "auto.leader.rebalance.enable": ("test_cluster.py::test_leadership_returns_to_the_preferred_replica",),
    "leader.imbalance.check.interval.seconds": ("test_cluster.py::test_leadership_returns_to_the_preferred_replica",),
    "leader.imbalance.per.broker.percentage": ("test_cluster.py::test_leadership_returns_to_the_preferred_replica",),
    "replica.lag.time.max.ms": (
        "test_cluster.py::test_without_enough_in_sync_replicas_acks_all_is_refused_and_acks_1_works",),
    "unclean.leader.election.enable": (
        "test_cluster.py::test_unclean_election_brings_a_stale_replica_back_and_counts_the_loss",),
    "offsets.topic.replication.factor": (
        "test_cluster.py::test_a_consumer_group_keeps_its_offsets_when_its_coordinator_dies",),
    # ACLs (issue 14)
    "authorizer.class.name": ("test_acls.py::test_acl_apis_are_security_disabled_without_an_authorizer",
                              "test_acls.py::test_writes_are_allowed_on_prefixed_topics_only_and_deny_wins"),
    "super.users": ("test_acls.py::test_super_users_may_do_everything",),
    "allow.everyone.if.no.acl.found": (
        "test_acls.py::test_allow_everyone_if_no_acl_found_decides_for_resources_without_acls",),
    # the broker's log lines (issue 15)
    "log.format": ("test_operator_tools.py::test_json_log_lines_and_per_component_levels",),
    "log.level": ("test_operator_tools.py::test_json_log_lines_and_per_component_levels",
                  "test_operator_tools.py::test_each_component_level_key_sets_its_loggers"),
    **{f"log.level.{component}": ("test_operator_tools.py::test_each_component_level_key_sets_its_loggers",)
       for component in ("broker", "cluster", "coordinator", "protocol", "security", "storage")},
    # transactions (issue 13)
    "transactional.id.expiration.ms": ("test_txn_coordinator.py::test_idle_ids_expire",),
    "transaction.remove.expired.transaction.cleanup.interval.ms": ("test_txn_coordinator.py::test_idle_ids_expire",),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "test_transactions.py::test_an_abandoned_transaction_is_aborted_at_its_timeout",
        "test_txn_coordinator.py::test_a_transaction_open_past_its_timeout_is_aborted",
    ),
    "transaction.max.timeout.ms": (
        "test_transactions.py::test_a_timeout_over_transaction_max_timeout_ms_is_refused",
        "test_txn_coordinator.py::test_a_timeout_over_the_maximum_is_refused",
    ),
    "transaction.state.log.num.partitions": ("test_transactions.py::test_the_state_topic_is_created_from_its_keys",),
    "transaction.state.log.segment.bytes": ("test_transactions.py::test_the_state_topic_is_created_from_its_keys",),
    "transaction.state.log.replication.factor": (
        "test_transactions.py::test_the_state_topic_is_created_from_its_keys",),
    "transaction.state.log.min.isr": ("test_transactions.py::test_the_state_topic_is_created_from_its_keys",),
    **{name: ("test_share_group_durability.py::test_a_restarted_broker_keeps_every_acknowledgement",)
       for name in ("share.coordinator.state.topic.num.partitions", "share.coordinator.state.topic.replication.factor",
                    "share.coordinator.state.topic.segment.bytes", "share.coordinator.state.topic.min.isr",
                    "share.coordinator.snapshot.update.records.per.snapshot")},
    "share.coordinator.state.topic.prune.interval.ms": (
        "test_share_group_durability.py::test_the_state_topic_is_pruned_below_the_oldest_snapshot_and_still_loads",),
    "transaction.partition.verification.enable": (
        "test_validation.py::test_a_transactional_batch_needs_its_partition_in_the_open_transaction",
        "test_validation.py::test_without_verification_a_transactional_batch_opens_its_transaction",
    ),
    # KIP-848 group configs' defaults and bounds: they shape what DescribeConfigs and
    # IncrementalAlterConfigs of a GROUP resource answer; consumer groups use the ones below too.
    **{name: ("test_dynamic_configs.py::test_group_configs_take_their_defaults_and_bounds_from_the_broker",)
       for name in BROKER_KEYS if name.startswith(("group.consumer.", "group.share.", "group.streams."))},
    "group.consumer.assignors": ("test_consumer_groups.py::test_max_size_and_assignors_come_from_the_config",),
    "group.consumer.max.size": ("test_consumer_groups.py::test_max_size_and_assignors_come_from_the_config",),
    "group.consumer.heartbeat.interval.ms": ("test_consumer_groups.py::test_heartbeat_errors",),
    "group.consumer.migration.policy": ("test_group_migration.py::test_the_migration_policy_and_empty_groups",),
    "group.share.record.lock.duration.ms": ("test_share_groups.py::test_share_sessions_and_acknowledgement_errors",
                                            "test_share_groups.py::test_lock_expiry_redelivers_to_another_consumer"),
    "group.share.delivery.count.limit": ("test_share_groups.py::test_share_sessions_and_acknowledgement_errors",),
    "group.share.partition.max.record.locks": (
        "test_share_groups.py::test_record_locks_bound_what_a_partition_has_in_flight",),
}

# Keys whose effect is in the code but whose test is still to be written (named in the report).
EFFECT_WITHOUT_TEST: dict[str, str] = {
    "replica.fetch.max.bytes": "bytes per partition in a follower's Fetch (cluster/fetcher.py)",
    "replica.fetch.response.max.bytes": "bytes per follower Fetch response, and the bound on its frame",
    "replica.fetch.wait.max.ms": "max_wait of a follower's Fetch",
    "replica.fetch.min.bytes": "min_bytes of a follower's Fetch",
    "replica.fetch.backoff.ms": "pause of a fetcher after a failed fetch",
    "num.replica.fetchers": "fetcher connections per leader broker",
    "replica.socket.timeout.ms": "how long a follower's connect and fetch may take",
}

ACCEPTED_WITHOUT_EFFECT: dict[str, str] = {
    "num.io.threads": "Kafka's request handler threads: requests are handled on the one event loop here",
    "segment.jitter.ms": "segments roll at segment.ms exactly; no random jitter yet",
    "log.roll.jitter.ms": "segments roll at segment.ms exactly; no random jitter yet",
    "log.roll.jitter.hours": "segments roll at segment.ms exactly; no random jitter yet",
    "preallocate": "segment files grow as they are written",
    "log.preallocate": "segment files grow as they are written",
    "message.downconversion.enable": "a no-op in Kafka 4 too: no request version that needs down-conversion",
    "log.message.downconversion.enable": "a no-op in Kafka 4 too: no request version that needs down-conversion",
    "remote.log.copy.disable": "no tiered storage",
    "remote.log.delete.on.disable": "no tiered storage",
    "local.retention.ms": "no tiered storage: the local log is the whole log",
    "local.retention.bytes": "no tiered storage: the local log is the whole log",
    "log.local.retention.ms": "no tiered storage: the local log is the whole log",
    "log.local.retention.bytes": "no tiered storage: the local log is the whole log",
    "leader.replication.throttled.replicas": "replication is not throttled yet",
    "follower.replication.throttled.replicas": "replication is not throttled yet",
}


def declared_keys() -> set[str]:
    return set(BROKER_KEYS) | set(TOPIC_KEYS)


def test_every_declared_key_is_accounted_for() -> None:
    accounted = set(EFFECT_TESTS) | set(EFFECT_WITHOUT_TEST) | set(ACCEPTED_WITHOUT_EFFECT)
    missing = sorted(declared_keys() - accounted)
    assert not missing, f"keys with neither an effect test nor a documented lack of effect: {missing}"
    stale = sorted(accounted - declared_keys())
    assert not stale, f"keys listed here but not declared in logbus.config: {stale}"


def test_named_effect_tests_exist() -> None:
    """Each `file.py::test_name` in the table names a test function of that file (or the whole file)."""
    defined: dict[str, set[str]] = {}
    for ids in EFFECT_TESTS.values():
        for node_id in ids:
            file_name, _, test_name = node_id.partition("::")
            if file_name not in defined:
                tree = ast.parse((TESTS / file_name).read_text(encoding="utf-8"))
                defined[file_name] = {
                    node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                }
            assert not test_name or test_name in defined[file_name], node_id


def test_keys_without_effect_are_documented_as_such() -> None:
    text = (TESTS.parent / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = text.split("## Accepted without effect\n", 1)[1].split("\n## ", 1)[0]
    for key in ACCEPTED_WITHOUT_EFFECT:
        assert f"`{key}`" in section, f"{key} missing from 'Accepted without effect'"


# --- effect tests ------------------------------------------------------------------------------


def start_serve(tmp_path: Path, properties: str) -> subprocess.Popen[str]:
    """`logbus serve --config FILE` with nothing else on the command line; waits for it to listen."""
    config = tmp_path / "server.properties"
    config.write_text(properties)
    process = subprocess.Popen(
        [sys.executable, "-m", "logbus", "serve", "--config", str(config)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    lines = iter(process.stdout.readline, "") if process.stdout else iter(())
    line = next((line for line in lines if "listening on" in line), "")  # after a line per listener
    assert "listening on" in line, line
    process.listening = line.strip()  # type: ignore[attr-defined]
    return process


def stop_serve(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0


def test_serve_takes_listeners_and_log_dir_from_server_properties(tmp_path: Path) -> None:
    logs = tmp_path / "kafka-logs"
    process = start_serve(tmp_path, f"listeners=PLAINTEXT://127.0.0.1:0\nlog.dir={logs}\nbroker.id=7\n")
    try:
        assert process.listening.startswith("logbus broker 7 listening on ")  # type: ignore[attr-defined]
        host_port = process.listening.rsplit(" ", 1)[1]  # type: ignore[attr-defined]
        assert host_port.startswith("127.0.0.1:") and not host_port.endswith(":9092")
        assert (logs / "meta.properties").exists() or any(logs.iterdir())
        assert not (tmp_path / "data").exists()
    finally:
        stop_serve(process)


def test_serve_prefers_log_dirs_over_log_dir(tmp_path: Path) -> None:
    process = start_serve(
        tmp_path, f"listeners=PLAINTEXT://127.0.0.1:0\nlog.dirs={tmp_path / 'first'}\nlog.dir={tmp_path / 'other'}\n"
    )
    try:
        assert (tmp_path / "first").is_dir() and not (tmp_path / "other").exists()
    finally:
        stop_serve(process)


def test_metadata_advertises_host_and_port() -> None:
    with running_broker(config={"advertised.listeners": "PLAINTEXT://advertised.invalid:19092"}) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap, **QUIET})
        brokers = producer.list_topics(timeout=10).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [("advertised.invalid", 19092)]


def test_metadata_advertises_the_bound_port_when_the_advertised_one_is_0() -> None:
    with running_broker(config={"advertised.listeners": "PLAINTEXT://127.0.0.1:0"}) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap, **QUIET})
        brokers = producer.list_topics(timeout=10).brokers
        assert [f"{b.host}:{b.port}" for b in brokers.values()] == [broker.bootstrap]


def test_logbus_io_threads_sizes_the_blocking_io_pool(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig({"logbus.io.threads": "3"}), 0, LOOPBACK, str(tmp_path))
    assert broker.logs._pool._max_workers == 3
    broker = Broker(BrokerConfig({"num.io.threads": "5"}), 0, LOOPBACK, str(tmp_path))
    assert broker.logs._pool._max_workers == 8  # Kafka's request threads: not this pool


def test_logbus_open_segments_max_is_the_descriptor_budget(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig({"logbus.open.segments.max": "7"}), 0, LOOPBACK, str(tmp_path))
    assert broker.logs.open_segments.limit == 7
    broker.logs.open(0, "c")  # the soft open-files limit is not looked at again
    assert broker.logs.open_segments.limit == 7


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker(config={"num.partitions": "1"}) as started:
        yield started


def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})


def describe_topic(broker: BrokerProcess, topic: str) -> dict:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    client = admin(broker)  # held until the future resolves: a collected client cancels its requests
    return client.describe_configs([resource])[resource].result(timeout=FUTURE_TIMEOUT_S)


def create(broker: BrokerProcess, topic: str, config: dict[str, str]) -> None:
    client = admin(broker)
    client.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(timeout=FUTURE_TIMEOUT_S)


def invalid_config(broker: BrokerProcess, topic: str, config: dict[str, str]) -> str:
    with pytest.raises(KafkaException) as raised:
        create(broker, topic, config)
    error = raised.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG, error
    return error.str()


KAFKA_41_VALUES = {
    "segment.jitter.ms": "1000",
    "preallocate": "true",
    "unclean.leader.election.enable": "true",
    "compression.gzip.level": "9",
    "compression.lz4.level": "17",
    "compression.zstd.level": "-5",
    "message.downconversion.enable": "false",
    "leader.replication.throttled.replicas": "0:0,1:0",
    "follower.replication.throttled.replicas": "*",
    "remote.storage.enable": "false",
    "remote.log.copy.disable": "true",
    "remote.log.delete.on.disable": "true",
    "local.retention.ms": "-2",
    "local.retention.bytes": "1000",
}


def test_kafka_41_topic_keys_are_accepted_validated_and_described(broker: BrokerProcess) -> None:
    create(broker, "kafka41-keys", KAFKA_41_VALUES)
    described = describe_topic(broker, "kafka41-keys")
    for name, value in KAFKA_41_VALUES.items():
        assert (described[name].value, described[name].source) == (value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value)

    assert "between 1 and 9, or -1" in invalid_config(broker, "bad-gzip", {"compression.gzip.level": "0"})
    assert "at most 17" in invalid_config(broker, "bad-lz4", {"compression.lz4.level": "18"})
    assert "at most 22" in invalid_config(broker, "bad-zstd", {"compression.zstd.level": "23"})
    assert "at least -131072" in invalid_config(broker, "bad-zstd", {"compression.zstd.level": "-131073"})
    assert "[partitionId]:[brokerId]" in invalid_config(
        broker, "bad-throttle", {"leader.replication.throttled.replicas": "0:x"}
    )
    assert "Tiered Storage functionality is disabled" in invalid_config(
        broker, "bad-remote", {"remote.storage.enable": "true"}
    )
    assert "min.compaction.lag.ms (10) > max.compaction.lag.ms (5)" in invalid_config(
        broker, "bad-lags", {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}
    )
    # Removed in Kafka 4.0, so refused as Kafka 4.1 refuses them.
    assert "Unknown topic config name" in invalid_config(
        broker, "removed-key", {"message.timestamp.difference.max.ms": "1000"}
    )

    resource = ConfigResource(
        ResourceType.TOPIC, "kafka41-keys",
        incremental_configs=[ConfigEntry("follower.replication.throttled.replicas", "0:0",
                                         incremental_operation=AlterConfigOpType.SET)],
    )
    client = admin(broker)
    client.incremental_alter_configs([resource])[resource].result(timeout=FUTURE_TIMEOUT_S)
    assert describe_topic(broker, "kafka41-keys")["follower.replication.throttled.replicas"].value == "0:0"

    bad_level = ConfigResource(
        ResourceType.TOPIC, "kafka41-keys",
        incremental_configs=[ConfigEntry("compression.gzip.level", "10", incremental_operation=AlterConfigOpType.SET)],
    )
    with pytest.raises(KafkaException) as raised:
        client.incremental_alter_configs([bad_level])[bad_level].result(timeout=FUTURE_TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert describe_topic(broker, "kafka41-keys")["compression.gzip.level"].value == "9"


SYNONYM_SETTINGS = {
    "log.roll.ms": ("segment.ms", "123456", "123456"),
    "log.flush.interval.messages": ("flush.messages", "5", "5"),
    "log.cleaner.min.cleanable.ratio": ("min.cleanable.dirty.ratio", "0.25", "0.25"),
    "log.cleanup.policy": ("cleanup.policy", "compact,delete", "compact,delete"),
    "log.roll.jitter.hours": ("segment.jitter.ms", "2", str(2 * 3_600_000)),
    "log.retention.bytes": ("retention.bytes", "99999", "99999"),
    "log.flush.interval.ms": ("flush.ms", "2500", "2500"),
    "log.index.interval.bytes": ("index.interval.bytes", "1024", "1024"),
    "log.index.size.max.bytes": ("segment.index.bytes", "4096", "4096"),
    "log.message.timestamp.type": ("message.timestamp.type", "LogAppendTime", "LogAppendTime"),
    "log.cleaner.delete.retention.ms": ("delete.retention.ms", "777", "777"),
    "log.segment.delete.delay.ms": ("file.delete.delay.ms", "4321", "4321"),
    "log.message.timestamp.after.max.ms": ("message.timestamp.after.max.ms", "7000", "7000"),
    "log.cleaner.min.compaction.lag.ms": ("min.compaction.lag.ms", "5", "5"),
    "log.cleaner.max.compaction.lag.ms": ("max.compaction.lag.ms", "600000", "600000"),
    "compression.gzip.level": ("compression.gzip.level", "4", "4"),
    "compression.lz4.level": ("compression.lz4.level", "3", "3"),
    "compression.zstd.level": ("compression.zstd.level", "10", "10"),
}


def test_broker_synonyms_set_the_topic_defaults() -> None:
    """A broker key that is a topic key's synonym sets that topic key's value (reported as
    STATIC_BROKER_CONFIG, as Kafka reports it), which is what storage reads (`config.log_config`)."""
    settings = {name: value for name, (_, value, _) in SYNONYM_SETTINGS.items()}
    settings["log.roll.hours"] = "1"  # log.roll.ms wins over it
    settings["log.flush.scheduler.interval.ms"] = "1000"  # log.flush.interval.ms wins over it
    with running_broker(config={"num.partitions": "1", **settings}) as started:
        create(started, "synonyms", {})
        described = describe_topic(started, "synonyms")
        for broker_key, (topic_key, _, expected) in SYNONYM_SETTINGS.items():
            value = described[topic_key]
            # Kafka drops the synonyms listed before the topic key's first broker key (log.roll.jitter.ms):
            # set in hours only, the value is the hours' and the source DEFAULT_CONFIG
            source = ConfigSource.DEFAULT_CONFIG if broker_key.endswith(".hours") else ConfigSource.STATIC_BROKER_CONFIG
            assert (value.value, value.source) == (expected, source.value), broker_key
    with running_broker(config={"num.partitions": "1", "log.roll.hours": "2",
                                "log.flush.scheduler.interval.ms": "3000"}) as started:
        create(started, "fallbacks", {})
        described = describe_topic(started, "fallbacks")
        assert described["segment.ms"].value == str(2 * 3_600_000)
        assert described["flush.ms"].value == "3000"


def test_delete_topic_enable_false_refuses_deletion() -> None:
    with running_broker(config={"delete.topic.enable": "false"}) as started:
        create(started, "kept", {})
        client = admin(started)
        futures = client.delete_topics(["kept"])
        with pytest.raises(KafkaException) as raised:
            futures["kept"].result(timeout=FUTURE_TIMEOUT_S)
        assert raised.value.args[0].code() == KafkaError.TOPIC_DELETION_DISABLED


def test_min_insync_replicas_above_the_isr_refuses_acks_all(broker: BrokerProcess) -> None:
    create(broker, "two-in-sync", {"min.insync.replicas": "2"})
    results: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "retries": 0,
                         "enable.idempotence": False, **QUIET})
    producer.produce("two-in-sync", b"value", on_delivery=lambda err, _msg: results.append(err))
    wait_until(lambda: producer.poll(0.1) is not None and results, message="the delivery report")
    assert results[0] is not None and results[0].code() == KafkaError.NOT_ENOUGH_REPLICAS


def join_group(connection: RawConnection, group: str, session_ms: int, member_id: str = "") -> Any:
    """JoinGroup v9 for a consumer member with one `range` protocol."""
    return connection.call(
        JOIN_GROUP, 9, group_id=group, session_timeout=timedelta(milliseconds=session_ms),
        rebalance_timeout=timedelta(seconds=10), member_id=member_id, group_instance_id=None,
        protocol_type="consumer", reason=None, protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
    )


def join_as_new_member(connection: RawConnection, group: str, session_ms: int) -> Any:
    """The two-step join of KIP-394: MEMBER_ID_REQUIRED hands out an id, the second join uses it."""
    first = join_group(connection, group, session_ms)
    if first.error_code != ErrorCode.member_id_required:
        return first
    return join_group(connection, group, session_ms, member_id=first.member_id)


@pytest.fixture(scope="module")
def group_broker() -> Iterator[BrokerProcess]:
    with running_broker(config={
        "group.min.session.timeout.ms": "2000", "group.max.session.timeout.ms": "5000", "group.max.size": "1",
        "group.initial.rebalance.delay.ms": "0",
    }) as started:
        with RawConnection(started.bootstrap) as connection:
            assert connection.call(FIND_COORDINATOR, 3, key="warm-up", key_type=0).error_code == ErrorCode.none
        yield started


def test_group_session_timeout_bounds(group_broker: BrokerProcess) -> None:
    """3 s is below Kafka's default minimum (6 s) and 6 s inside its default range: the keys decide."""
    with RawConnection(group_broker.bootstrap) as connection:
        assert join_group(connection, "too-long", 6000).error_code == ErrorCode.invalid_session_timeout
        assert join_group(connection, "too-short", 1500).error_code == ErrorCode.invalid_session_timeout
        assert join_as_new_member(connection, "in-range", 3000).error_code == ErrorCode.none


def test_group_max_size_refuses_one_member_too_many(group_broker: BrokerProcess) -> None:
    with RawConnection(group_broker.bootstrap) as first, RawConnection(group_broker.bootstrap) as second:
        assert join_as_new_member(first, "one-seat", 3000).error_code == ErrorCode.none
        assert join_as_new_member(second, "one-seat", 3000).error_code == ErrorCode.group_max_size_reached


def test_group_initial_rebalance_delay_holds_a_new_groups_first_join() -> None:
    """The first join of a new group waits the delay (5 s here, 3 s by default) for more members."""
    with (
        running_broker(config={"group.initial.rebalance.delay.ms": "5000"}) as started,
        RawConnection(started.bootstrap, timeout=30) as connection,
    ):
        assert connection.call(FIND_COORDINATOR, 3, key="slow", key_type=0).error_code == ErrorCode.none
        first = join_group(connection, "slow", 6000)
        started_at = time.monotonic()
        joined = join_group(connection, "slow", 6000, member_id=first.member_id)
        assert joined.error_code == ErrorCode.none
        assert time.monotonic() - started_at >= 4.5


def test_default_replication_factor_is_what_create_topics_uses() -> None:
    with running_broker(config={"default.replication.factor": "2"}) as started:
        client = admin(started)
        futures = client.create_topics([NewTopic("two-copies", 1)])  # replication factor -1: the default
        with pytest.raises(KafkaException) as raised:
            futures["two-copies"].result(timeout=FUTURE_TIMEOUT_S)
        assert raised.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR


def test_a_full_offset_index_rolls_the_segment(broker: BrokerProcess) -> None:
    """segment.index.bytes=24 holds three 8-byte entries; with an entry per batch, every third batch rolls."""
    create(broker, "small-index", {"segment.index.bytes": "24", "index.interval.bytes": "1"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, **QUIET})
    for i in range(10):
        producer.produce("small-index", value=b"v%d" % i, partition=0)
        assert producer.flush(10) == 0  # one batch per record
    segments = [name for name in os.listdir(os.path.join(broker.data_dir, "small-index-0")) if name.endswith(".log")]
    assert len(segments) >= 3, segments


def upkeep_jobs(data_dir: Path, config: dict[str, str]) -> dict[str, int]:
    """The background jobs a broker started in this process runs: job name -> interval in ms."""

    async def started() -> dict[str, int]:
        broker = Broker(BrokerConfig(config), 0, LOOPBACK, str(data_dir))
        await broker.start()
        try:
            frames = [task.get_coro().cr_frame.f_locals for task in broker.logs._tasks]
            return {frame["job"].__name__: frame["interval_ms"] for frame in frames}
        finally:
            await broker.stop()

    return asyncio.run(started())


def test_log_cleaner_enable_false_starts_no_cleaner(tmp_path: Path) -> None:
    assert "clean_due_logs" in upkeep_jobs(tmp_path / "on", {})
    assert "clean_due_logs" not in upkeep_jobs(tmp_path / "off", {"log.cleaner.enable": "false"})


def test_upkeep_intervals_come_from_their_keys(tmp_path: Path) -> None:
    jobs = upkeep_jobs(tmp_path, {
        "log.cleaner.backoff.ms": "1234", "log.retention.check.interval.ms": "2345",
        "log.flush.offset.checkpoint.interval.ms": "3456", "log.flush.scheduler.interval.ms": "456",
        "log.flush.start.offset.checkpoint.interval.ms": "5678",
    })
    assert jobs == {
        "clean_due_logs": 1234, "apply_retention": 2345, "write_recovery_checkpoints": 3456,
        "write_log_start_checkpoint": 5678, "flush_due_logs": 456,
    }
