"""The console's aiohttp application: its state (configuration, history, one sampler per cluster), the
template renderer, and the start and stop of the samplers with the web server."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import jinja2
from aiohttp import web

from backbone.client.audit.report import format_percent
from backbone.console import auth
from backbone.console.charts import line_chart
from backbone.console.config import ConsoleConfig
from backbone.console.history import HistoryStore
from backbone.console.lag_history import GroupHistoryCache
from backbone.console.problems import clock
from backbone.console.sampler import ClusterSampler
from backbone.console.snapshot import ClusterSnapshot

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)

PACKAGE = Path(__file__).parent
STATE: web.AppKey[ConsoleState] = web.AppKey("console", object)  # type: ignore[arg-type]


def _size(value: int | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} B"


def _duration_ms(value: int | float | None) -> str:
    if value is None:
        return "-"
    if value < 0:
        return "forever"
    seconds = value / 1000
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s"


def _number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}"


class ConsoleState:
    def __init__(self, config: ConsoleConfig, history: HistoryStore) -> None:
        self.config = config
        self.history = history
        self.notifier: Any = None
        self.group_history = GroupHistoryCache()
        self.samplers = {c.name: ClusterSampler(c, config, history) for c in config.clusters}
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(PACKAGE / "templates"),
            autoescape=True,  # every name, key, value and header from a cluster is untrusted
            undefined=jinja2.StrictUndefined,
        )
        self.templates.filters.update(
            size=_size,
            duration=_duration_ms,
            number=_number,
            clock=clock,
            q=lambda s: quote(str(s), safe=""),
            percent=format_percent,  # the audit report's own rounding: 100.000% only when nothing is missing
        )
        self.templates.globals.update(line_chart=line_chart)
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task] = []
        # /metrics: its registry, made on the first scrape, and the last text with the snapshots it shows.
        self.registry: CollectorRegistry | None = None
        self.metrics_cache: tuple[tuple, bytes] | None = None

    def snapshot(self, cluster: str) -> ClusterSnapshot:
        sampler = self.samplers.get(cluster)
        if sampler is None:
            raise web.HTTPNotFound(
                text=f"no cluster named {cluster!r}; the console watches {', '.join(self.samplers)}"
            )
        return sampler.snapshot

    def snapshots(self) -> list[ClusterSnapshot]:
        return [s.snapshot for s in self.samplers.values()]


def state(request: web.Request) -> ConsoleState:
    return request.app[STATE]


def render(request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
    console = state(request)
    page = console.templates.get_template(template).render(
        user=request.get(auth.USER),
        role=request.get(auth.ROLE),
        csrf=request.get(auth.CSRF, ""),
        clusters=[s.snapshot for s in console.samplers.values()],
        interval_ms=console.config.interval_ms,
        path=request.path,
        **context,
    )
    response = web.Response(text=page, content_type="text/html", status=status)
    response.headers["Content-Security-Policy"] = (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:"
    )
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


@web.middleware
async def _error_pages(request: web.Request, handler: Any) -> web.StreamResponse:
    """4xx answers as a page (or JSON under /api/) that says what was wrong."""
    try:
        return await handler(request)
    except web.HTTPException as error:
        if error.status < 400 or request.path.startswith(("/static/",)):
            raise
        reason = error.text or error.reason
        if request.path.startswith("/api/") or request.headers.get("Accept", "").startswith(
            "application/json"
        ):
            return web.json_response({"error": reason, "status": error.status}, status=error.status)
        if error.status == 401:
            raise
        return render(request, "error.html", status=error.status, code=error.status, reason=reason)


def build_app(config: ConsoleConfig, history: HistoryStore, *, sample: bool = True) -> web.Application:
    from backbone.console import actions, api, metrics, notify, pages

    app = web.Application(middlewares=[_error_pages], client_max_size=1 << 20)
    console = ConsoleState(config, history)
    app[STATE] = console
    auth.install(app, config)
    console.notifier = notify.Notifier(config.webhooks)
    for sampler in console.samplers.values():
        sampler.listeners.append(console.notifier.on_snapshot)
    pages.routes(app)
    actions.routes(app)
    api.routes(app)
    metrics.routes(app)
    app.router.add_static("/static/", PACKAGE / "static", name="static")

    async def start(app: web.Application) -> None:
        if sample:
            for sampler in console.samplers.values():
                console.tasks.append(
                    asyncio.create_task(sampler.run(console.stop), name=f"sampler-{sampler.settings.name}")
                )
        await console.notifier.start()

    async def stop(app: web.Application) -> None:
        console.stop.set()
        await asyncio.gather(*console.tasks, return_exceptions=True)
        await console.notifier.close()
        history.close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app
