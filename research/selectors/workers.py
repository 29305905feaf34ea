"""Reads of the agent processes."""

from datetime import timedelta

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from research.models import Worker


def live_workers() -> QuerySet[Worker]:
    """The processes that run agents (web servers, runagents workers) that have not stopped
    and have heartbeated recently."""
    recent = timezone.now() - timedelta(seconds=settings.RESEARCH_WORKER_DEAD_SECONDS)
    return Worker.objects.filter(stopped_at__isnull=True, heartbeat_at__gte=recent)


def agent_process_alive() -> bool:
    """Whether some process runs agents (a web server or a runagents worker)."""
    return live_workers().exists()
