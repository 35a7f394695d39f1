"""ISO-8601 durations as Java's `java.time.Duration.parse` reads them (PnDTnHnMn.nS): the group
config `share.auto.offset.reset=by_duration:<duration>` and `logbus share-groups reset-offsets
--by-duration`, as Kafka's config and kafka-share-groups.sh read them."""

from __future__ import annotations

import re

_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.IGNORECASE)


def iso_duration_ms(text: str) -> int:
    """`text` in ms; ValueError when it is not an ISO-8601 duration."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or text.strip().upper() in ("P", "PT"):
        raise ValueError(f"not an ISO-8601 duration (PnDTnHnMnS): {text!r}")
    days, hours, minutes, seconds = (float(part or 0) for part in match.groups())
    return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)
