"""Reads of the agent processes."""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from research.models import Worker


def agent_process_alive() -> bool:
    """Whether some process runs agents (a web server or a runagents worker): one that has
    not stopped and has heartbeated recently."""
    recent = timezone.now() - timedelta(seconds=settings.RESEARCH_WORKER_DEAD_SECONDS)
    return Worker.objects.filter(stopped_at__isnull=True, heartbeat_at__gte=recent).exists()
