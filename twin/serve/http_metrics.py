"""HTTP metrics of `twin serve` as vLLM's API server has them: prometheus-fastapi-instrumentator's
`http_requests_total` (handler, method, status class) and `http_request_duration_seconds` (handler,
method), with its defaults as vLLM sets them (vllm/entrypoints/serve/instrumentator/metrics.py): the
handler is the matched route's path template, "none" for a path no route has; /metrics and the
probe routes are not counted; a request lasts until its response's last byte (a stream's whole length).

Each HTTP worker measures its own requests (an ASGI middleware, no work per streamed chunk) and
ships them to the engine process at most every SHIP_S (twin.serve.relay.LiveTwin.http_done), which
sums every worker's (twin.serve.metrics.ServeMetrics.http): one set of counters whatever worker a
scrape reaches.
"""
from __future__ import annotations

import re
import time

from starlette.routing import Match

EXCLUDED = [re.compile(p) for p in ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")]
METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"))   # any other: "other" (a
#                                                         client's own method names would make series without bound)


class HttpMetrics:
    """ASGI middleware around `app`: `record(handler, method, status class, seconds)` once per HTTP
    request. `routes` are Starlette routes (matched for their template), `paths` plain paths the app
    serves itself."""

    def __init__(self, app, routes, paths, record):
        self.app, self.routes, self.paths, self.record = app, routes, frozenset(paths), record

    def handler(self, scope) -> str:
        path = scope.get("path", "")
        if path in self.paths:
            return path
        for route in self.routes:
            if route.matches(scope)[0] == Match.FULL:
                return route.path
        return "none"

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        handler = self.handler(scope)
        if any(p.search(handler) for p in EXCLUDED):
            return await self.app(scope, receive, send)
        t0, status = time.perf_counter(), [500]

        async def sending(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)
        try:
            await self.app(scope, receive, sending)
        finally:
            method = scope["method"] if scope["method"] in METHODS else "other"
            self.record(handler, method, f"{str(status[0])[0]}xx", time.perf_counter() - t0)
