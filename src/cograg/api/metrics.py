"""Prometheus metrics of one app: requests and latency per route, model tokens, refusals.

Each app has its own registry (two apps in one process, as in the tests, do not collide). With
several workers each process reports its own numbers; a scraper sums them per instance.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from starlette.requests import Request
from starlette.responses import Response

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# any token is a valid HTTP method: a label per method a client makes up would grow the series
# (and the scrape) without bound, so the rest count as "other"
STANDARD_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE"})


def metric_method(method: str) -> str:
    return method if method in STANDARD_METHODS else "other"


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("cograg_http_requests", "HTTP requests by route, method and status",
                                ["route", "method", "status"], registry=self.registry)
        self.latency = Histogram("cograg_http_request_duration_seconds", "HTTP request latency by route",
                                 ["route", "method"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.tokens = Counter("cograg_model_tokens", "LLM tokens spent answering, by kind and call purpose",
                              ["kind", "purpose"], registry=self.registry)
        self.answers = Counter("cograg_answers", "answers by route and execution mode", ["route", "mode"],
                               registry=self.registry)
        self.refusals = Counter("cograg_refusals", "answers that refused, clarified or fell back, by route",
                                ["route"], registry=self.registry)

    def observe_answer(self, resp: Any, trace: dict[str, Any] | None) -> None:
        """Count one answer: its route and mode, a refusal, and the tokens of its model calls."""
        self.answers.labels(route=resp.route or "", mode=resp.mode or "").inc()
        if resp.fallback:
            self.refusals.labels(route=resp.route or "").inc()
        data = (trace or {}).get("data", trace or {})
        for call in data.get("model_calls", []):
            purpose = str(call.get("purpose", ""))
            self.tokens.labels(kind="prompt", purpose=purpose).inc(int(call.get("prompt_tokens") or 0))
            self.tokens.labels(kind="completion", purpose=purpose).inc(int(call.get("completion_tokens") or 0))

    async def middleware(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        status = 500
        try:
            response = await call_next(request)
            status = response.status_code
            return response
        finally:
            route = request.scope.get("route")
            # the route's template, not the raw path: one series per endpoint, whatever the ids
            name = getattr(route, "path", None) or "unmatched"
            method = metric_method(request.method)
            self.requests.labels(route=name, method=method, status=str(status)).inc()
            self.latency.labels(route=name, method=method).observe(time.perf_counter() - started)

    def render(self) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


__all__ = ["STANDARD_METHODS", "Metrics", "metric_method"]
