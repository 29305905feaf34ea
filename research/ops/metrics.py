"""`/metrics` in Prometheus's text format: django-prometheus's request metrics plus Canopy's.

Canopy's own figures are read from the database at scrape time, so one scrape of any web
process shows the whole deployment (agents on every `runagents` worker included): runs by
status, agents working and waiting for a slot, live agent processes, and from the usage
ledger the model calls, tokens, cost and latency by model. The event push lag is this web
process's own: how long an event took from being stored to being sent to a browser.

Who may scrape: a request bearing `Authorization: Bearer <METRICS_TOKEN>`, or one from a
client address in METRICS_ALLOWED_IPS (addresses or networks; loopback only by default).
The client address is REMOTE_ADDR for a request that came straight to daphne. Behind a
reverse proxy REMOTE_ADDR is the proxy's (127.0.0.1 when it runs on the same host), so a
forwarded request, one bearing X-Forwarded-For, Forwarded or X-Real-IP, is judged otherwise:
with NUM_PROXIES=N > 0, by the Nth address from the right of X-Forwarded-For (as DRF's
throttles read it), and not by address at all when the header has fewer than N entries or
only Forwarded or X-Real-IP; with NUM_PROXIES=0, which does not say how many entries a
proxy wrote, never by address: such a request gets in with the token only. A proxy that
sends none of these headers cannot be told from a local scraper: it must set
X-Forwarded-For (or not pass /metrics on).
"""

import hmac
import ipaddress
from collections.abc import Iterator
from datetime import datetime

from django.conf import settings
from django.db.models import BooleanField, Count, ExpressionWrapper, Q, Sum
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from research.models import LLMCall, Run, Status
from research.selectors.workers import live_workers

LATENCY_BUCKETS_SECONDS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120)

EVENT_PUSH_LAG = Histogram(
    "canopy_event_push_lag_seconds",
    "From an event stored to its being sent to a browser by this web process.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


def observe_push_lag(event: dict) -> None:
    """Record how late a live event reaches a browser (its `at` is when it was stored)."""
    try:
        stored = datetime.fromisoformat(event["at"])
    except (KeyError, TypeError, ValueError):
        return
    EVENT_PUSH_LAG.observe(max(0.0, (timezone.now() - stored).total_seconds()))


class CanopyCollector(Collector):
    """Reads the figures of the whole deployment from the database at each scrape."""

    def collect(self) -> Iterator[Metric]:
        yield from _runs()
        yield from _agents()
        yield from _model_calls()

    def describe(self) -> list[Metric]:
        return []  # read at scrape time only, never when registering


def _runs() -> Iterator[Metric]:
    runs = GaugeMetricFamily(
        "canopy_runs",
        "Runs by status; kind is root (a research) or subagent.",
        labels=["status", "kind"],
    )
    counts = {
        (row["status"], row["is_root"]): row["n"]
        for row in Run.objects.annotate(
            is_root=ExpressionWrapper(Q(parent__isnull=True), output_field=BooleanField())
        )
        .values("status", "is_root")
        .annotate(n=Count("id"))
        .order_by()
    }
    for status in Status.values:
        for kind, is_root in (("root", True), ("subagent", False)):
            runs.add_metric([status, kind], counts.get((status, is_root), 0))
    yield runs


def _agents() -> Iterator[Metric]:
    queued = Run.objects.filter(status=Status.QUEUED)
    handed = queued.filter(Q(parent__isnull=False) | Q(worker__isnull=False))
    yield GaugeMetricFamily(
        "canopy_agents_working",
        "Agents working now, on every agent process.",
        value=Run.objects.filter(status=Status.WORKING).count(),
    )
    yield GaugeMetricFamily(
        "canopy_agents_waiting_for_slot",
        "Agents handed to an agent process that wait for a free slot there.",
        value=handed.count(),
    )
    yield GaugeMetricFamily(
        "canopy_roots_waiting_for_worker",
        "Researches queued that no agent process has claimed yet.",
        value=queued.filter(parent__isnull=True, worker__isnull=True).count(),
    )
    yield GaugeMetricFamily(
        "canopy_workers_live",
        "Agent processes (web or runagents) that heartbeated recently.",
        value=live_workers().count(),
    )


def _model_calls() -> Iterator[Metric]:
    buckets = {
        f"le_{index}": Count("id", filter=Q(latency_ms__lte=int(bound * 1000)))
        for index, bound in enumerate(LATENCY_BUCKETS_SECONDS)
    }
    rows = (
        LLMCall.objects.values("model")
        .annotate(
            calls=Count("id"),
            input=Sum("input_tokens"),
            output=Sum("output_tokens"),
            cost=Sum("cost_usd"),
            latency_total_ms=Sum("latency_ms"),
            **buckets,
        )
        .order_by("model")
    )
    calls = CounterMetricFamily("canopy_model_calls", "Model calls, by model.", labels=["model"])
    tokens = CounterMetricFamily(
        "canopy_model_tokens", "Tokens, by model and direction.", labels=["model", "direction"]
    )
    cost = CounterMetricFamily("canopy_model_cost_usd", "Cost in USD, by model.", labels=["model"])
    latency = HistogramMetricFamily(
        "canopy_model_call_latency_seconds",
        "How long a model call took (retries included), by model.",
        labels=["model"],
    )
    for row in rows:
        model = row["model"]
        calls.add_metric([model], row["calls"])
        tokens.add_metric([model, "input"], row["input"] or 0)
        tokens.add_metric([model, "output"], row["output"] or 0)
        cost.add_metric([model], float(row["cost"] or 0))
        cumulative = [
            (floatToGoString(bound), row[f"le_{index}"])
            for index, bound in enumerate(LATENCY_BUCKETS_SECONDS)
        ]
        latency.add_metric(
            [model], [*cumulative, ("+Inf", row["calls"])], (row["latency_total_ms"] or 0) / 1000
        )
    yield from (calls, tokens, cost, latency)


REGISTRY.register(CanopyCollector())


FORWARDING_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")


def scrape_allowed(request: HttpRequest) -> bool:
    token = settings.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if token and hmac.compare_digest(header.encode(), f"Bearer {token}".encode()):
        return True
    try:
        address = ipaddress.ip_address(client_address(request) or "")
    except ValueError:
        return False
    return any(address in network for network in settings.METRICS_ALLOWED_NETWORKS)


def client_address(request: HttpRequest) -> str | None:
    """The address to judge the scraper by, or None when no address can be believed."""
    meta = request.META
    if not any(meta.get(name) for name in FORWARDING_HEADERS):
        return meta.get("REMOTE_ADDR")
    proxies = settings.REST_FRAMEWORK.get("NUM_PROXIES") or 0
    forwarded_for = meta.get("HTTP_X_FORWARDED_FOR", "")
    hops = [hop.strip() for hop in forwarded_for.split(",")] if forwarded_for else []
    if proxies <= 0 or len(hops) < proxies:
        return None
    return hops[-proxies]  # the entries left of it are the client's to write


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not scrape_allowed(request):
        response = HttpResponse(
            "metrics: send Authorization: Bearer <METRICS_TOKEN> or scrape from an address "
            "in METRICS_ALLOWED_IPS.\n",
            status=403,
            content_type="text/plain",
        )
        return response
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
