"""Where a consumer group's offsets go when they are reset: the arithmetic `logbus groups
reset-offsets` and the console's reset action share (no I/O: offsets are looked up through the
caller's `lookup`)."""

from __future__ import annotations

from collections.abc import Callable

Key = tuple[str, int]  # (topic, partition)
# ListOffsets for the keys: "earliest", "latest" or a timestamp in ms (-1 when no record is that late)
Lookup = Callable[[list[Key], str | int], dict[Key, int]]
TARGETS = ("earliest", "latest", "offset", "timestamp")


def reset_targets(keys: list[Key], target: str, value: int | None, lookup: Lookup) -> dict[Key, int]:
    """The new offset per partition for `target` (one of TARGETS; "offset" and "timestamp" take
    `value`, a timestamp in ms), kept within each partition's log as Kafka's tool keeps them; a
    timestamp later than every record goes to the log end."""
    earliest = lookup(keys, "earliest")
    latest = lookup(keys, "latest")
    if target == "earliest":
        return earliest
    if target == "latest":
        return latest
    if value is None:
        raise ValueError(f"resetting to an {target} needs a value")
    if target == "offset":
        return {key: min(max(value, earliest[key]), latest[key]) for key in keys}
    found = lookup(keys, value)
    return {key: found[key] if found[key] >= 0 else latest[key] for key in keys}
