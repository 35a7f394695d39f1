"""The Kafka APIs this broker serves: one module per API key.

Each module opens with a comment on the versions it serves and defines:
    API_KEY: int
    MIN_VERSION, MAX_VERSION: the range advertised in ApiVersions
    MIN_SERVED (optional): the lowest version actually decoded, when it differs from
        MIN_VERSION (Produce is advertised from v0, as Kafka does, but serves v3+)
    async def handle(ctx: RequestContext, request) -> response entity | RawResponse | None
    def metric_names(request) -> tuple[str, ...] (optional): the request names it counts as in
        the request metrics (default: Kafka's name of the API, the module's name in CamelCase)
Adding an API means adding a module here; the registry finds it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from typing import Any


@dataclass(frozen=True, slots=True)
class ApiSpec:
    key: int
    name: str
    min_version: int
    max_version: int
    min_served: int
    handle: Callable[..., Awaitable[Any]]
    metric_names: Callable[[Any], tuple[str, ...]]

    def serves(self, version: int) -> bool:
        return self.min_served <= version <= self.max_version


@cache
def registry() -> dict[int, ApiSpec]:
    specs = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if not hasattr(module, "API_KEY"):
            continue
        specs[module.API_KEY] = ApiSpec(
            module.API_KEY, info.name, module.MIN_VERSION, module.MAX_VERSION,
            getattr(module, "MIN_SERVED", module.MIN_VERSION), module.handle,
            getattr(module, "metric_names", None) or _named(info.name),
        )
    if not specs:  # listing the package failed (pkgutil hides the OSError): never cache an empty registry
        raise RuntimeError(f"no Kafka API modules found in {__path__}")
    return specs


def _named(module_name: str) -> Callable[[Any], tuple[str, ...]]:
    """Kafka's name of an API (`list_offsets` -> ListOffsets), whatever the request."""
    names = ("".join(word.capitalize() for word in module_name.split("_")),)
    return lambda _request: names
