"""Remote MCP servers: what the agent runtime learns of them (their tool lists)."""

from django.utils import timezone

from research.models import RemoteServer


def remote_catalog_store(*, server_id: int, tools: list[dict] | None, error: str = "") -> None:
    """Record a server's tool list as just loaded, or (`tools` None) why loading it failed;
    the list loaded before a failure stays, for the names and summaries agents see."""
    fields = {"catalog_checked_at": timezone.now(), "catalog_error": error[:2000]}
    if tools is not None:
        fields["catalog"] = tools
    RemoteServer.objects.filter(pk=server_id).update(**fields)
