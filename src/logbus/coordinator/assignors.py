"""Server-side assignors of consumer groups (KIP-848): `uniform` (the default) and `range`.

An assignor maps the members' subscriptions and the subscribed topics' partition counts to a
target assignment: member id -> {topic: partitions}. Both are pure functions.

- `uniform` (Kafka's UniformAssignor): every partition to one subscribed member, balanced so that
  two members eligible for a partition differ by at most one in their counts, and sticky: a
  partition stays with the member that has it in the previous target unless balance needs it
  (then a member gives up its highest-numbered partitions, as Kafka's does).
- `range` (Kafka's RangeAssignor): per topic, its subscribers sorted by member id get consecutive
  ranges, the first `partitions % members` of them one more.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

Assignment = dict[str, frozenset[int]]  # topic name -> partitions
Subscriptions = Mapping[str, frozenset[str]]  # member id -> subscribed topic names
Assignor = Callable[[Subscriptions, Mapping[str, int], Mapping[str, Assignment]], dict[str, Assignment]]

# Kafka's class names are accepted as the short names (group.consumer.assignors takes either)
CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def uniform(subscriptions: Subscriptions, partitions: Mapping[str, int],
            previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    owner: dict[tuple[str, int], str] = {}
    counts = dict.fromkeys(subscriptions, 0)
    for member, assignment in sorted(previous.items()):
        for topic, numbers in assignment.items():
            if member not in subscriptions or topic not in subscriptions[member]:
                continue
            for number in numbers:
                if number < partitions.get(topic, 0):
                    owner[(topic, number)] = member
                    counts[member] += 1
    for topic in sorted(partitions):
        eligible = sorted(m for m, topics in subscriptions.items() if topic in topics)
        for number in range(partitions[topic]):
            if eligible and (topic, number) not in owner:
                member = min(eligible, key=lambda m: (counts[m], m))
                owner[(topic, number)] = member
                counts[member] += 1
    _balance(owner, counts, subscriptions)
    return _by_member(owner, subscriptions)


def _balance(owner: dict[tuple[str, int], str], counts: dict[str, int], subscriptions: Subscriptions) -> None:
    """Move partitions from the fullest members to eligible emptier ones until no move helps: the
    highest-numbered first, so that a member keeps its lowest ones, as Kafka's UniformAssignor."""
    for _ in range(len(owner) + 1):  # every move lowers the spread: bounded by the partitions
        moved = False
        for key in sorted(owner, key=lambda k: (-counts[owner[k]], k[0], -k[1])):
            holder = owner[key]
            eligible = [m for m, topics in subscriptions.items() if key[0] in topics]
            target = min(eligible, key=lambda m: (counts[m], m))
            if counts[target] + 1 < counts[holder]:
                owner[key] = target
                counts[holder] -= 1
                counts[target] += 1
                moved = True
                break
        if not moved:
            return


def range_assignor(subscriptions: Subscriptions, partitions: Mapping[str, int],
                   previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    owner: dict[tuple[str, int], str] = {}
    for topic in sorted(partitions):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members:
            continue
        share, extra = divmod(partitions[topic], len(members))
        start = 0
        for position, member in enumerate(members):
            size = share + (1 if position < extra else 0)
            for number in range(start, start + size):
                owner[(topic, number)] = member
            start += size
    return _by_member(owner, subscriptions)


def _by_member(owner: dict[tuple[str, int], str], subscriptions: Subscriptions) -> dict[str, Assignment]:
    result: dict[str, dict[str, set[int]]] = {member: {} for member in subscriptions}
    for (topic, number), member in owner.items():
        result[member].setdefault(topic, set()).add(number)
    return {member: {t: frozenset(p) for t, p in topics.items()} for member, topics in result.items()}


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_assignor}


def assignor_name(name: str) -> str:
    """The short name of an assignor given by its short or its Kafka class name."""
    return CLASS_NAMES.get(name, name)
