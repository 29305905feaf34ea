"""Reads of the agent processes."""

from datetime import timedelta

from django.conf import settings
from django.db.models import QuerySet
from django.db.models.functions import Now

from research.models import Worker


def live_workers() -> QuerySet[Worker]:
    """The processes that run agents (web servers, runagents workers) that have not stopped
    and have heartbeated recently, by the database's clock (the one heartbeats use)."""
    recent = Now() - timedelta(seconds=settings.RESEARCH_WORKER_DEAD_SECONDS)
    return Worker.objects.filter(stopped_at__isnull=True, heartbeat_at__gte=recent)


def agent_process_alive() -> bool:
    """Whether some process would take a queued research (a web server or a runagents
    worker; not a CLI or an MCP client running only its own)."""
    return live_workers().filter(claims_roots=True).exists()
