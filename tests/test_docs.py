"""The configuration reference names every key the broker knows, with the default the code has."""

from __future__ import annotations

import re
from pathlib import Path

from logbus.config import BROKER_KEYS, TOPIC_KEYS

DOC = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
ROW = re.compile(r"^\| `(?P<key>[a-z0-9.]+)` \| (?P<second>[^|]*) \|", re.MULTILINE)


def documented(section: str) -> dict[str, str]:
    """Key -> second column of the tables under the `## {section}` heading."""
    text = DOC.read_text(encoding="utf-8").split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return {m["key"]: m["second"].strip() for m in ROW.finditer(text)}


def test_every_broker_key_is_documented_with_its_default() -> None:
    rows = documented("Broker keys")
    for key in BROKER_KEYS.values():
        expected = "(none)" if key.default is None else key.default
        assert rows.get(key.name) == f"`{expected}`", f"{key.name}: docs say {rows.get(key.name)!r}"


def test_every_topic_key_is_documented_with_its_fallbacks() -> None:
    rows = documented("Topic keys")
    for topic_key in TOPIC_KEYS.values():
        fallbacks = ", ".join(f"`{name}`" for name, _ in topic_key.synonyms)
        default = topic_key.key.default
        expected = fallbacks or (f"(none; default `{default}`)" if default else "(none; default empty)")
        assert rows.get(topic_key.key.name) == expected, topic_key.key.name
