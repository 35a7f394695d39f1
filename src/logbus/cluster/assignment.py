"""Replica assignment for new partitions, as Kafka's AdminUtils.assignReplicasToBrokers does it.

Rack-unaware: partition p's first replica is broker (p + start) mod n, and its followers are
shifted from it by an amount that grows every n partitions, so that both leaders and followers
spread evenly and a broker's replicas are not always followed by the same neighbours. The start
index and the first shift are random unless given (tests give them). Rack-aware (every broker
has a rack): brokers are interleaved rack by rack first, and a partition's followers skip racks
that already hold one of its replicas while racks remain.
"""

from __future__ import annotations

import random


def _replica_index(first: int, shift: int, index: int, count: int) -> int:
    return (first + 1 + (shift + index) % (count - 1)) % count


def assign_replicas(
    brokers: list[int], partitions: int, replication_factor: int, first_partition: int = 0,
    racks: dict[int, str] | None = None, start_index: int = -1,
) -> list[list[int]]:
    """Replica lists for partitions `first_partition`.. of a topic (the first replica leads)."""
    if replication_factor < 1 or replication_factor > len(brokers):
        raise ValueError(f"replication factor {replication_factor} with {len(brokers)} brokers")
    ordered = sorted(brokers)
    rack_aware = bool(racks) and all(b in racks for b in ordered) and len({racks[b] for b in ordered}) > 1
    if rack_aware:
        ordered = _rack_alternated(ordered, racks)
    count = len(ordered)
    start = start_index if start_index >= 0 else random.randrange(count)
    shift = start_index if start_index >= 0 else random.randrange(count)
    result = []
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start) % count
        replicas = [ordered[first]]
        if rack_aware:
            replicas += _rack_aware_followers(ordered, racks, first, shift, replication_factor)
        else:
            replicas += [ordered[_replica_index(first, shift, j, count)] for j in range(replication_factor - 1)]
        result.append(replicas)
    return result


def _rack_alternated(brokers: list[int], racks: dict[int, str]) -> list[int]:
    """Brokers ordered rack by rack: the first of each rack, then the second of each, ..."""
    by_rack: dict[str, list[int]] = {}
    for broker in brokers:
        by_rack.setdefault(racks[broker], []).append(broker)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    return [column[i] for i in range(max(map(len, columns))) for column in columns if i < len(column)]


def _rack_aware_followers(ordered: list[int], racks: dict[int, str], first: int, shift: int,
                          replication_factor: int) -> list[int]:
    count = len(ordered)
    chosen = [ordered[first]]
    used_racks = {racks[ordered[first]]}
    all_racks = {racks[b] for b in ordered}
    k = 0
    while len(chosen) < replication_factor:
        broker = ordered[_replica_index(first, shift, k, count)]
        k += 1
        if broker in chosen:
            continue
        if racks[broker] in used_racks and len(used_racks) < len(all_racks) and k < 2 * count:
            continue  # prefer a new rack while one is left
        chosen.append(broker)
        used_racks.add(racks[broker])
    return chosen[1:]
