"""The console's web application: Starlette routes rendering Jinja2 pages on the server.

Every page carries its data in the HTML (charts as inline SVG), so it works with scripts off and
can be tested with plain HTTP; static/console.js only re-fetches the page every few seconds and
swaps in its `data-fragment` parts. Reads run in Starlette's thread pool (sync endpoints); the
actions are POST forms that need the per-process CSRF token and a confirmation, and are refused
with 403 in read-only mode. Everything from the cluster is escaped (autoescape).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from jinja2 import Environment, PackageLoader
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..client.admin import parse_key_values
from ..client.offset_reset import TARGETS as RESET_TARGETS
from . import charts, messages, metrics
from .admin import Actions, ResetRequest
from .cluster_view import ClusterView, ConsoleError
from .history import History, partition_lag

log = logging.getLogger("logbus.console")
MAX_FORM_BYTES = 64 * 1024
MIN_CHART_WINDOW_S = 60.0
MAX_PROBLEM_ROWS = 200  # under-replicated/offline partitions listed on the cluster page


@dataclass(frozen=True)
class Settings:
    client_config: dict[str, Any]
    timeout_s: float = 10.0
    read_only: bool = False
    sample_interval_s: float = 5.0
    history_s: float = 3600.0
    refresh_s: float = 5.0
    metrics_urls: list[str] = field(default_factory=list)


class Console:
    """The state of one console process: the cluster it reads, its history, its CSRF token."""

    def __init__(self, settings: Settings, kafka: Any, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.view = ClusterView(kafka, settings.client_config, settings.timeout_s)
        self.actions = Actions(self.view)
        self.history = History(settings.history_s, clock)
        self.clock = clock
        self.csrf_token = secrets.token_urlsafe(32)
        self.templates = Environment(loader=PackageLoader("logbus.console"), autoescape=True)
        self.templates.filters["path_part"] = lambda text: urllib.parse.quote(str(text), safe="")
        self.templates.filters["bytes"] = human_bytes

    def chart(self, chart_id: str, title: str, points: list[tuple[float, float]], unit: str) -> Any:
        """A chart of the whole history kept so far (at least a minute, at most `--history`)."""
        now = self.clock()
        span = now - points[0][0] if points else 0.0
        window = min(self.settings.history_s, max(MIN_CHART_WINDOW_S, span))
        return charts.line_chart(chart_id, title, points, now, window, unit)

    async def sample_forever(self) -> None:
        """The sampler behind the lag and throughput charts; a failed sample (a ConsoleError, or
        anything else the client raises) is logged and skipped, and sampling goes on."""
        while True:
            try:
                end_offsets, committed = await asyncio.to_thread(self.view.sample)
                self.history.record(end_offsets, committed)
            except Exception as exc:  # noqa: BLE001 - one failed sample must not end the sampler
                log.warning("logbus console: sample skipped: %s", exc)
            await asyncio.sleep(self.settings.sample_interval_s)


def human_bytes(size: int | None) -> str:
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


# ---------------------------------------------------------------- rendering


def console_of(request: Request) -> Console:
    return request.app.state.console


def render(request: Request, template: str, status: int = 200, **data: Any) -> HTMLResponse:
    console = console_of(request)
    page = console.templates.get_template(template).render(
        path=request.url.path, read_only=console.settings.read_only, csrf_token=console.csrf_token,
        refresh_ms=int(console.settings.refresh_s * 1000), **data)
    return HTMLResponse(page, status_code=status)


async def console_error(request: Request, exc: Exception) -> HTMLResponse:
    status = exc.status if isinstance(exc, ConsoleError) else 500
    return render(request, "result.html", status=status, title="Error", message=str(exc), ok=False)


# ---------------------------------------------------------------- pages


def cluster_page(request: Request) -> HTMLResponse:
    view = console_of(request).view
    cluster = view.cluster()
    problems = [(topic.name, p) for topic in cluster.topics.values() for p in topic.partitions
                if p.under_replicated or p.offline]
    return render(request, "cluster.html", title="Cluster", cluster=cluster, groups=len(view.groups()),
                  partitions=sum(len(t.partitions) for t in cluster.topics.values()),
                  under_replicated=sum(p.under_replicated for _, p in problems),
                  offline=sum(p.offline for _, p in problems), problems=problems[:MAX_PROBLEM_ROWS])


def brokers_page(request: Request) -> HTMLResponse:
    console = console_of(request)
    return render(request, "brokers.html", title="Brokers", cluster=console.view.cluster(),
                  scrapes=[metrics.scrape(url) for url in console.settings.metrics_urls],
                  metric_columns=list(metrics.SHOWN.values()))


def topics_page(request: Request) -> HTMLResponse:
    console = console_of(request)
    sizes = console.view.partition_sizes()
    topic_sizes: dict[str, int] = {}
    for (topic, _), size in sizes.items():
        topic_sizes[topic] = topic_sizes.get(topic, 0) + size
    return render(request, "topics.html", title="Topics", topics=list(console.view.cluster().topics.values()),
                  sizes=topic_sizes if sizes else None, produced=console.history.latest_produced_rate)


def topic_page(request: Request) -> HTMLResponse:
    console = console_of(request)
    name = request.path_params["name"]
    topic = console.view.topic(name)
    keys = [(name, p.id) for p in topic.partitions]
    sizes = console.view.partition_sizes()
    chart = console.chart("produced", "produced", console.history.topic_produced_rate(name), "records/s")
    return render(request, "topic.html", title=f"Topic {name}", topic=topic, configs=console.view.topic_configs(name),
                  earliest=console.view.offsets(keys, "earliest"), latest=console.view.offsets(keys, "latest"),
                  sizes={key[1]: size for key, size in sizes.items() if key[0] == name} if sizes else None,
                  chart=chart)


def messages_page(request: Request) -> HTMLResponse:
    console = console_of(request)
    name = request.path_params["name"]
    topic = console.view.topic(name)
    query = message_query(request.query_params)
    records = messages.browse(console.view, name, query) if "partition" in request.query_params else None
    return render(request, "messages.html", title=f"Messages of {name}", topic=topic, query=query, records=records,
                  formats=messages.FORMATS, max_limit=messages.MAX_LIMIT)


def message_query(params: Any) -> messages.Query:
    form = params.get("format", "text")
    if form not in messages.FORMATS:
        raise ConsoleError(f"format must be one of {', '.join(messages.FORMATS)}")
    limit = int_param(params, "limit", messages.DEFAULT_LIMIT)
    return messages.Query(partition=int_param(params, "partition", 0), offset=int_param(params, "offset", None),
                          timestamp_ms=int_param(params, "timestamp", None),
                          limit=min(max(limit or 1, 1), messages.MAX_LIMIT), format=form)


def int_param(params: Any, name: str, default: int | None) -> int | None:
    text = (params.get(name) or "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise ConsoleError(f"{name} must be a whole number, got {text!r}") from None


def groups_page(request: Request) -> HTMLResponse:
    console = console_of(request)
    return render(request, "groups.html", title="Groups", groups=console.view.groups(),
                  lag=console.history.latest_group_lag, share_groups=console.view.share_groups())


def share_group_page(request: Request) -> HTMLResponse:
    group_id = request.path_params["group_id"]
    group = console_of(request).view.share_group(group_id)
    return render(request, "share_group.html", title=f"Share group {group_id}", group=group)


def group_page(request: Request) -> HTMLResponse:
    console = console_of(request)
    group_id = request.path_params["group_id"]
    group = console.view.group(group_id)
    owners = {key: member for member in group.members for key in member.assignment}
    rows = [(key, group.committed.get(key), group.end_offsets.get(key), owners.get(key))
            for key in sorted(set(group.committed) | set(owners))]
    history = console.history
    lag_chart = console.chart("lag", "lag", history.group_lag(group_id), "records")
    rate_chart = console.chart("consumed", "consumed", history.group_consumed_rate(group_id), "records/s")
    return render(request, "group.html", title=f"Group {group_id}", group=group, rows=rows, lag_of=partition_lag,
                  lag_chart=lag_chart, rate_chart=rate_chart, topics=sorted({key[0] for key in group.committed}),
                  reset_targets=RESET_TARGETS)


# ---------------------------------------------------------------- actions


def action(perform: Callable[[Console, dict[str, str], dict[str, str]], tuple[str, str]]) -> Callable:
    """A POST endpoint, refused without the CSRF token; `perform(console, path_params, form)` runs in a
    thread and returns (what happened, where to go next)."""

    async def endpoint(request: Request) -> HTMLResponse:
        console = console_of(request)
        form = await read_form(request)
        if not hmac.compare_digest(form.get("csrf", ""), console.csrf_token):
            raise ConsoleError("missing or stale form token: reload the page and try again", 403)
        message, link = await asyncio.to_thread(perform, console, dict(request.path_params), form)
        return render(request, "result.html", title="Done", message=message, link=link, ok=True)

    return endpoint


async def read_form(request: Request) -> dict[str, str]:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise ConsoleError("form too large", 413)
    pairs = urllib.parse.parse_qsl(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {key: value.strip() for key, value in pairs}


def require_confirmation(form: dict[str, str], expected: str = "yes") -> None:
    if form.get("confirm") != expected:
        wanted = "tick the confirmation box" if expected == "yes" else f"type {expected!r} to confirm"
        raise ConsoleError(f"not confirmed: {wanted}")


def form_int(form: dict[str, str], name: str, default: int | None = None) -> int | None:
    return int_param(form, name, default)


def form_configs(form: dict[str, str], name: str) -> dict[str, str]:
    try:
        return parse_key_values([line for line in form.get(name, "").splitlines() if line.strip()], name)
    except ValueError as exc:
        raise ConsoleError(str(exc)) from None


def create_topic(console: Console, _params: dict[str, str], form: dict[str, str]) -> tuple[str, str]:
    require_confirmation(form)
    name = form.get("name", "")
    if not name:
        raise ConsoleError("a topic needs a name")
    console.actions.create_topic(name, form_int(form, "partitions", -1), form_int(form, "replication_factor", -1),
                                 form_configs(form, "configs"))
    return f"Created topic {name}.", f"/topics/{urllib.parse.quote(name, safe='')}"


def delete_topic(console: Console, params: dict[str, str], form: dict[str, str]) -> tuple[str, str]:
    name = params["name"]
    require_confirmation(form, name)
    console.actions.delete_topic(name)
    return f"Deleted topic {name}.", "/topics"


def alter_topic_configs(console: Console, params: dict[str, str], form: dict[str, str]) -> tuple[str, str]:
    name = params["name"]
    require_confirmation(form)
    removed = [line.strip() for line in form.get("delete", "").splitlines() if line.strip()]
    console.actions.alter_configs(name, form_configs(form, "configs"), removed)
    return f"Altered the configs of topic {name}.", f"/topics/{urllib.parse.quote(name, safe='')}"


def add_partitions(console: Console, params: dict[str, str], form: dict[str, str]) -> tuple[str, str]:
    name = params["name"]
    require_confirmation(form)
    total = form_int(form, "partitions")
    if total is None:
        raise ConsoleError("give the new partition count")
    console.actions.add_partitions(name, total)
    return f"Topic {name} now has {total} partitions.", f"/topics/{urllib.parse.quote(name, safe='')}"


def reset_offsets(console: Console, params: dict[str, str], form: dict[str, str]) -> tuple[str, str]:
    group = params["group_id"]
    require_confirmation(form)
    target = form.get("to", "")
    if target not in RESET_TARGETS:
        raise ConsoleError(f"reset to one of {', '.join(RESET_TARGETS)}")
    new = console.actions.reset_offsets(ResetRequest(group, form.get("topic", ""), target, form_int(form, "value")))
    moved = ", ".join(f"{t}-{p}: {offset}" for (t, p), offset in sorted(new.items()))
    return f"Reset the offsets of group {group}: {moved}.", f"/groups/{urllib.parse.quote(group, safe='')}"


# ---------------------------------------------------------------- the application


class ReadOnly:
    """Answers 403 to anything but GET and HEAD, whatever the path (`--read-only`)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] not in ("GET", "HEAD"):
            await HTMLResponse("the console is read-only", status_code=403)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def create_app(settings: Settings, kafka: Any) -> Starlette:
    console = Console(settings, kafka)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        sampler = asyncio.create_task(console.sample_forever())
        try:
            yield
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler

    routes = [
        Route("/", cluster_page),
        Route("/brokers", brokers_page),
        Route("/topics", topics_page),
        Route("/topics", action(create_topic), methods=["POST"]),
        Route("/topics/{name}", topic_page),
        Route("/topics/{name}/messages", messages_page),
        Route("/topics/{name}/delete", action(delete_topic), methods=["POST"]),
        Route("/topics/{name}/configs", action(alter_topic_configs), methods=["POST"]),
        Route("/topics/{name}/partitions", action(add_partitions), methods=["POST"]),
        Route("/groups", groups_page),
        Route("/groups/{group_id:path}/reset-offsets", action(reset_offsets), methods=["POST"]),
        Route("/groups/{group_id:path}", group_page),
        Route("/share-groups/{group_id:path}", share_group_page),
        Mount("/static", StaticFiles(packages=[("logbus.console", "static")]), name="static"),
    ]
    middleware = [Middleware(ReadOnly)] if settings.read_only else []
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware,
                    exception_handlers={ConsoleError: console_error, Exception: console_error})
    app.state.console = console
    return app
