"""Changes to per-entity config maps (a user's SCRAM credentials, an entity's quotas), applied
copy on write: the stores build the new state beside the current one and switch to it only once
it is written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

Entity = TypeVar("Entity")
Key = TypeVar("Key")
Value = TypeVar("Value")


def apply_entity_changes(current: Mapping[Entity, Mapping[Key, Value]],
                         changes: Mapping[Entity, Mapping[Key, Value | None]]) -> dict[Entity, dict[Key, Value]]:
    """The maps after `changes` (None removes a key), as a new mapping (`current` is untouched);
    an entity left without any key disappears."""
    result = {entity: dict(values) for entity, values in current.items()}
    for entity, values in changes.items():
        mine = result.setdefault(entity, {})
        for key, value in values.items():
            if value is None:
                mine.pop(key, None)
            else:
                mine[key] = value
        if not mine:
            del result[entity]
    return result
